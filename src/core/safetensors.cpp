#include "core/safetensors.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace ssmkit {
namespace {

using Json = nlohmann::json;

// Headers beyond this are rejected before parsing (the format's own reference reader uses the
// same 100 MB bound): a corrupt length must not make us parse gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// Element size of every dtype the format defines; 0 for an unknown name.
int64_t ElementSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
      {"U64", 8}, {"I32", 4}, {"U32", 4},  {"I16", 2},     {"U16", 2},
      {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

Status Error(const std::string& file, const std::string& what) {
  return Status::InvalidArgument(file + ": " + what);
}

Status TensorError(const std::string& file, const std::string& name, const std::string& what) {
  return Status::InvalidArgument(file + ": tensor '" + name + "': " + what);
}

// A non-negative integer that fits int64.
bool ReadCount(const Json& j, int64_t* v) {
  if (!j.is_number_integer() && !j.is_number_unsigned()) return false;
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  *v = j.get<int64_t>();
  return *v >= 0;
}

Status ParseEntry(const std::string& file, const std::string& name, const Json& entry,
                  const uint8_t* data, int64_t data_bytes, SafetensorsTensor* t) {
  if (!entry.is_object()) return TensorError(file, name, "header entry is not an object");
  const auto dtype = entry.find("dtype");
  const auto shape = entry.find("shape");
  const auto offsets = entry.find("data_offsets");
  if (dtype == entry.end() || !dtype->is_string()) {
    return TensorError(file, name, "missing or non-string \"dtype\"");
  }
  if (shape == entry.end() || !shape->is_array()) {
    return TensorError(file, name, "missing or non-array \"shape\"");
  }
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    return TensorError(file, name, "\"data_offsets\" must be an array [begin, end]");
  }
  t->name = name;
  t->file = file;
  t->dtype_name = dtype->get<std::string>();
  const int64_t esize = ElementSize(t->dtype_name);
  if (esize == 0) return TensorError(file, name, "unknown dtype \"" + t->dtype_name + "\"");
  t->float_dtype = t->dtype_name == "F32" || t->dtype_name == "BF16" || t->dtype_name == "F16";
  t->dtype = t->dtype_name == "BF16"  ? DType::kBF16
             : t->dtype_name == "F16" ? DType::kF16
                                      : DType::kF32;
  if (shape->size() > static_cast<size_t>(kMaxRank)) {
    return TensorError(
        file, name, "rank " + std::to_string(shape->size()) + " above " + std::to_string(kMaxRank));
  }
  int64_t numel = 1;
  for (const Json& d : *shape) {
    int64_t v = 0;
    if (!ReadCount(d, &v))
      return TensorError(file, name, "shape entries must be non-negative integers");
    if (v > 0 && numel > std::numeric_limits<int64_t>::max() / esize / v) {
      return TensorError(file, name, "shape too large");
    }
    numel *= v;
    t->shape.push_back(v);
  }
  int64_t begin = 0, end = 0;
  if (!ReadCount((*offsets)[0], &begin) || !ReadCount((*offsets)[1], &end) || begin > end) {
    return TensorError(file, name, "data_offsets must be integers 0 <= begin <= end");
  }
  if (end > data_bytes) {
    return TensorError(file, name,
                       "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                           "] reach past the data (" + std::to_string(data_bytes) +
                           " bytes): the file is truncated");
  }
  if (end - begin != numel * esize) {
    return TensorError(file, name,
                       "data_offsets span " + std::to_string(end - begin) + " bytes, but " +
                           t->dtype_name + " " + t->shape_string() + " needs " +
                           std::to_string(numel * esize));
  }
  t->data = data + begin;
  t->nbytes = end - begin;
  return Status::Ok();
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::shape_string() const {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
    default:
      return nullptr;
  }
}

Tensor ContiguousView(const void* data, DType dtype, const std::vector<int64_t>& shape) {
  Tensor t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.rank = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

Tensor SafetensorsTensor::view() const { return ContiguousView(data, dtype, shape); }

Status SafetensorsCheckpoint::AddFile(const std::string& path,
                                      const std::map<std::string, std::string>* expected) {
  try {
    return AddFileUnchecked(path, expected);
  } catch (const nlohmann::json::exception& e) {  // a header field of an unexpected JSON type
    return Error(path, std::string("malformed header: ") + e.what());
  }
}

Status SafetensorsCheckpoint::AddFileUnchecked(const std::string& path,
                                               const std::map<std::string, std::string>* expected) {
  auto file = std::make_unique<MappedFile>();
  SSMKIT_RETURN_IF_ERROR(MappedFile::Open(path, file.get()));
  const uint8_t* bytes = file->data();
  const uint64_t size = file->size();
  if (size < 8)
    return Error(path, "too short for a safetensors header (" + std::to_string(size) + " bytes)");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | bytes[i];  // little-endian
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return Error(path, "header length " + std::to_string(header_len) + " exceeds the file (" +
                           std::to_string(size) + " bytes): not a safetensors file, or truncated");
  }
  const char* header = reinterpret_cast<const char*>(bytes + 8);
  const Json root = Json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error(path, "the header is not valid JSON");
  if (!root.is_object()) return Error(path, "the header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  const int64_t data_bytes = static_cast<int64_t>(size - 8 - header_len);
  const std::string file_name = std::filesystem::path(path).filename().string();
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") continue;
    SafetensorsTensor t;
    SSMKIT_RETURN_IF_ERROR(ParseEntry(path, name, entry, data, data_bytes, &t));
    if (expected != nullptr) {
      const auto it = expected->find(name);
      if (it != expected->end() && it->second != file_name) {
        return TensorError(path, name, "the index places it in " + it->second);
      }
    }
    if (tensors_.count(name)) {
      return TensorError(path, name, "also present in " + tensors_.at(name).file);
    }
    // The format does not promise aligned data (transformers pads the header to 8 bytes, other
    // writers may not): a tensor whose bytes do not start on a multiple of its element size is
    // copied to aligned memory, so that it can be read as floats.
    const int64_t esize = t.nbytes / std::max<int64_t>(1, t.numel());
    if (t.nbytes > 0 && reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(esize) != 0) {
      copies_.emplace_back(new uint8_t[static_cast<size_t>(t.nbytes)]);
      std::memcpy(copies_.back().get(), t.data, static_cast<size_t>(t.nbytes));
      t.data = copies_.back().get();
    }
    tensors_.emplace(name, std::move(t));
  }
  files_.push_back(std::move(file));
  return Status::Ok();
}

Status SafetensorsCheckpoint::OpenFile(const std::string& path, SafetensorsCheckpoint* checkpoint) {
  SafetensorsCheckpoint c;
  SSMKIT_RETURN_IF_ERROR(c.AddFile(path, nullptr));
  *checkpoint = std::move(c);
  return Status::Ok();
}

Status SafetensorsCheckpoint::OpenDirectory(const std::string& dir,
                                            SafetensorsCheckpoint* checkpoint) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(single, ec)) return OpenFile(single.string(), checkpoint);
  if (!fs::exists(index, ec)) {
    return Status::InvalidArgument(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  std::string text;
  SSMKIT_RETURN_IF_ERROR(ReadTextFile(index.string(), &text));
  const Json root = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error(index.string(), "not valid JSON");
  const auto map = root.is_object() ? root.find("weight_map") : root.end();
  if (!root.is_object() || map == root.end() || !map->is_object()) {
    return Error(index.string(), "expected an object with a \"weight_map\" object");
  }
  std::map<std::string, std::string> expected;
  std::set<std::string> shards;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string())
      return Error(index.string(), "weight_map['" + name + "'] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..") {
      return Error(index.string(),
                   "weight_map['" + name + "'] = \"" + f + "\" is not a file in the directory");
    }
    expected[name] = f;
    shards.insert(f);
  }
  SafetensorsCheckpoint c;
  for (const std::string& shard : shards) {
    SSMKIT_RETURN_IF_ERROR(c.AddFile((fs::path(dir) / shard).string(), &expected));
  }
  for (const auto& [name, file] : expected) {
    if (!c.tensors_.count(name)) {
      return TensorError((fs::path(dir) / file).string(), name,
                         "listed in the index but absent from the file");
    }
  }
  *checkpoint = std::move(c);
  return Status::Ok();
}

const SafetensorsTensor* SafetensorsCheckpoint::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::string SafetensorsCheckpoint::description() const {
  std::string s;
  for (const auto& f : files_) s += (s.empty() ? "" : ", ") + f->path();
  return s;
}

}  // namespace ssmkit
