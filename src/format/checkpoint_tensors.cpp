#include "format/checkpoint_tensors.h"

#include <cmath>

#include "core/error.h"
#include "core/numeric.h"

namespace strata {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_shape(const Checkpoint& ck, const TensorEntry& e, const std::vector<int64_t>& want) {
  if (e.shape != want)
    fail("{}: tensor \"{}\" has shape {}, expected {}", ck.file_of(e.name).path(), e.name, shape_str(e.shape),
         shape_str(want));
}

}  // namespace

Weight load_weight(const Checkpoint& ck, const std::string& name, int64_t rows, int64_t cols,
                   int64_t block_rows, int64_t block_cols) {
  const TensorEntry& e = ck.entry(name);
  check_shape(ck, e, {rows, cols});
  const SafetensorsFile& f = ck.file_of(name);
  Weight w;
  w.name = name;
  w.rows = rows;
  w.cols = cols;
  switch (e.dtype) {
    case DType::F32:
      w.format = WeightFormat::F32;
      w.data.resize(e.bytes());
      f.read(e, w.data.data());
      break;
    case DType::BF16:
      w.format = WeightFormat::BF16;
      w.data.resize(e.bytes());
      f.read(e, w.data.data());
      break;
    case DType::F16: {  // stored as f32: f16 checkpoints are rare and small here
      std::vector<uint16_t> tmp(e.numel);
      f.read(e, tmp.data());
      w.format = WeightFormat::F32;
      w.data.resize(e.numel * sizeof(float));
      float* out = reinterpret_cast<float*>(w.data.data());
      for (size_t i = 0; i < tmp.size(); ++i) out[i] = f16_to_f32(tmp[i]);
      break;
    }
    case DType::F8_E4M3: {
      std::string sname = name;
      const std::string suffix = ".weight";
      if (sname.size() >= suffix.size() && sname.compare(sname.size() - suffix.size(), suffix.size(), suffix) == 0)
        sname = sname.substr(0, sname.size() - suffix.size());
      sname += ".weight_scale_inv";
      if (!ck.has(sname))
        fail("{}: FP8 tensor \"{}\" has no scale tensor \"{}\"", f.path(), name, sname);
      if (block_rows < 1 || block_cols < 1)  // would divide by zero below
        fail("{}: FP8 tensor \"{}\": block size {}x{} is not positive", f.path(), name, block_rows, block_cols);
      const int64_t nbr = (rows + block_rows - 1) / block_rows, nbc = (cols + block_cols - 1) / block_cols;
      const TensorEntry& se = ck.entry(sname);
      check_shape(ck, se, {nbr, nbc});
      if (se.dtype != DType::F32)
        fail("{}: scale tensor \"{}\" has dtype {}, expected F32", ck.file_of(sname).path(), sname,
             dtype_name(se.dtype));
      w.format = WeightFormat::FP8_BLOCK;
      w.block_rows = block_rows;
      w.block_cols = block_cols;
      w.data.resize(e.bytes());
      f.read(e, w.data.data());
      w.scales.resize(se.numel);
      ck.file_of(sname).read(se, w.scales.data());
      for (float s : w.scales)
        if (!std::isfinite(s) || s < 0.0f)
          fail("{}: scale tensor \"{}\" holds a negative or non-finite scale", ck.file_of(sname).path(), sname);
      break;
    }
    default:
      fail("{}: tensor \"{}\" has dtype {}, expected BF16, F16, F32 or F8_E4M3", f.path(), name,
           dtype_name(e.dtype));
  }
  return w;
}

std::vector<float> load_f32(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorEntry& e = ck.entry(name);
  check_shape(ck, e, shape);
  const SafetensorsFile& f = ck.file_of(name);
  std::vector<float> out(e.numel);
  switch (e.dtype) {
    case DType::F32: f.read(e, out.data()); break;
    case DType::BF16:
    case DType::F16: {
      std::vector<uint16_t> tmp(e.numel);
      f.read(e, tmp.data());
      for (size_t i = 0; i < tmp.size(); ++i)
        out[i] = e.dtype == DType::BF16 ? bf16_to_f32(tmp[i]) : f16_to_f32(tmp[i]);
      break;
    }
    default:
      fail("{}: tensor \"{}\" has dtype {}, expected BF16, F16 or F32", f.path(), name, dtype_name(e.dtype));
  }
  return out;
}

}  // namespace strata
