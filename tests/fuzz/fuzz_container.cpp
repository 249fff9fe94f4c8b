// Container manifest + expert record reads (format/container.h): the input
// is manifest.json. A manifest that validates must keep every promise the
// readers rely on -- checked here, where a violation aborts: every dense span
// inside its listed file, every expert part inside blob_bytes, blob_bytes
// within the stride, count x stride inside the experts file, sizes equal to
// what the format and shape need, one checksum per expert; weight_view() of
// each expert part (how the expert store reads a record) stays inside the
// blob; and the manifest round-trips through manifest_to_json unchanged.
#include <map>

#include "core/error.h"
#include "core/json.h"
#include "format/container.h"
#include "fuzz_util.h"

namespace {

void check_sizes(const strata::TensorRecord& t) {
  if (t.shape.size() != 2) return;
  const auto [data, scales] =
      strata::tensor_bytes(t.format, t.shape[0], t.shape[1], t.group, t.block_rows, t.block_cols, t.scales_bf16 ? 2 : 4);
  STRATA_FUZZ_CHECK(t.bytes == data && t.scales_bytes == scales);
}

bool inside(uint64_t off, uint64_t n, uint64_t size) { return off <= size && n <= size - off; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strata;
  Manifest m;
  try {
    m = manifest_from_json(parse_json(fuzz::as_text(data, size), "manifest.json"), "manifest.json");
  } catch (const Error&) {
    return 0;
  }
  std::map<std::string, uint64_t> file_size;
  for (const FileRecord& f : m.files) file_size[f.name] = f.bytes;
  for (const auto& [name, t] : m.tensors) {
    STRATA_FUZZ_CHECK(file_size.count(t.file));
    const uint64_t fs = file_size[t.file];
    STRATA_FUZZ_CHECK(inside(t.offset, t.bytes, fs));
    if (t.scales_bytes) STRATA_FUZZ_CHECK(inside(t.scales_offset, t.scales_bytes, fs));
    check_sizes(t);
  }
  static std::vector<uint8_t> blob;
  for (const ExpertLayerRecord& e : m.expert_layers) {
    STRATA_FUZZ_CHECK(e.count >= 1 && e.stride > 0 && e.stride % kExpertAlign == 0 && e.blob_bytes <= e.stride);
    STRATA_FUZZ_CHECK(e.xxh.size() == static_cast<size_t>(e.count));
    STRATA_FUZZ_CHECK(file_size.count(e.file));
    uint64_t span = 0;
    STRATA_FUZZ_CHECK(!__builtin_mul_overflow(e.stride, static_cast<uint64_t>(e.count), &span));
    STRATA_FUZZ_CHECK(span <= file_size[e.file]);
    for (const TensorRecord* t : {&e.gate, &e.up, &e.down}) {
      STRATA_FUZZ_CHECK(t->shape.size() == 2);
      STRATA_FUZZ_CHECK(inside(t->offset, t->bytes, e.blob_bytes));
      if (t->scales_bytes) STRATA_FUZZ_CHECK(inside(t->scales_offset, t->scales_bytes, e.blob_bytes));
      check_sizes(*t);
      if (e.blob_bytes <= (1u << 20)) {
        blob.assign(e.blob_bytes, 0);
        const Weight w = weight_view(*t, blob.data(), "expert");
        const auto* lo = blob.data();
        const auto* hi = blob.data() + blob.size();
        STRATA_FUZZ_CHECK(w.view_data >= lo && w.view_data + t->bytes <= hi);
        if (w.view_scales || w.view_scales16) {
          const auto* s = w.view_scales16 ? reinterpret_cast<const uint8_t*>(w.view_scales16)
                                          : reinterpret_cast<const uint8_t*>(w.view_scales);
          STRATA_FUZZ_CHECK(s >= lo && s + t->scales_bytes <= hi);
        }
      }
    }
  }
  const Json again = manifest_to_json(m);
  try {
    const Manifest m2 = manifest_from_json(again, "round trip");
    STRATA_FUZZ_CHECK(manifest_to_json(m2) == again);
  } catch (const Error& e) {
    std::fprintf(stderr, "a valid manifest did not round-trip: %s\n", e.what());
    std::abort();
  }
  return 0;
}
