// strata dequantize: a container back to a Hugging Face checkpoint of f32
// weights -- exactly the model the container computes, for checking a
// quantized model against an independent reference.
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <fstream>

#include "cli/commands.h"
#include "format/container.h"
#include "format/safetensors_writer.h"
#include "model/model.h"
#include "core/error.h"
#include "core/json.h"

namespace strata::cli {

namespace {

TensorToWrite dequantized(const std::string& name, const TensorRecord& t, const uint8_t* base) {
  TensorToWrite out{name, DType::F32, t.shape, {}};
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
  out.bytes.resize(static_cast<size_t>(rows * cols) * sizeof(float));
  float* dst = reinterpret_cast<float*>(out.bytes.data());
  if (t.shape.size() == 1) {
    std::memcpy(dst, base + t.offset, t.bytes);
    return out;
  }
  const Weight w = weight_view(t, base, name);
  for (int64_t r = 0; r < rows; ++r) w.row_f32(r, dst + r * cols);
  return out;
}

}  // namespace

void add_dequantize_command(CLI::App& app, Runner& run) {
  struct Flags {
    std::string model, out;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("dequantize", "Write a container's weights back as an f32 Hugging Face checkpoint");
  cmd->add_option("--model", f->model, "Container directory")->required();
  cmd->add_option("--out", f->out, "Output directory")->required();
  cmd->callback([f, &run] {
    run = [f]() -> int {
      if (!is_container(f->model)) fail("{}: not a strata container (no manifest.json)", f->model);
      auto m = load_model(f->model);
      const Manifest& man = *m->manifest;
      std::filesystem::create_directories(f->out);
      std::vector<TensorToWrite> ts;
      for (const auto& [name, t] : man.tensors) ts.push_back(dequantized(name, t, m->dense_blob.data()));
      for (const auto& e : man.expert_layers) {
        std::ifstream in(f->model + "/" + e.file, std::ios::binary);
        std::vector<uint8_t> blob(e.blob_bytes);
        for (int64_t x = 0; x < e.count; ++x) {
          in.seekg(static_cast<std::streamoff>(e.stride * static_cast<uint64_t>(x)));
          in.read(reinterpret_cast<char*>(blob.data()), static_cast<std::streamsize>(blob.size()));
          if (!in) fail("{}/{}: cannot read expert {}", f->model, e.file, x);
          const std::string p = fmt::format("model.layers.{}.mlp.experts.{}.", e.layer, x);
          ts.push_back(dequantized(p + "gate_proj.weight", e.gate, blob.data()));
          ts.push_back(dequantized(p + "up_proj.weight", e.up, blob.data()));
          ts.push_back(dequantized(p + "down_proj.weight", e.down, blob.data()));
        }
      }
      Json config = man.config;
      config.erase("quantization_config");
      config["torch_dtype"] = "float32";
      {
        std::ofstream c(f->out + "/config.json.tmp");
        c << config.dump(2) << "\n";
        if (!c) fail("{}/config.json: write failed", f->out);
      }
      std::filesystem::rename(f->out + "/config.json.tmp", f->out + "/config.json");
      write_safetensors(f->out + "/model.safetensors", ts);
      std::fprintf(stderr, "dequantize: wrote %zu tensors to %s\n", ts.size(), f->out.c_str());
      return 0;
    };
  });
}

}  // namespace strata::cli
