#include "core/gguf_writer.hpp"

#include <cstring>
#include <fstream>

namespace ssmkit {
namespace {

template <typename T>
std::string Pod(T v) {
  std::string b(sizeof(T), '\0');
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

std::string Str(const std::string& s) { return Pod(static_cast<uint64_t>(s.size())) + s; }

// One scalar of `type` from a read value's integer or real.
std::string Scalar(GgufType type, int64_t integer, double real) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return Pod(static_cast<uint8_t>(integer));
    case GgufType::kU16:
    case GgufType::kI16:
      return Pod(static_cast<uint16_t>(integer));
    case GgufType::kU32:
    case GgufType::kI32:
      return Pod(static_cast<uint32_t>(integer));
    case GgufType::kU64:
    case GgufType::kI64:
      return Pod(static_cast<uint64_t>(integer));
    case GgufType::kF32:
      return Pod(static_cast<float>(real));
    case GgufType::kF64:
      return Pod(real);
    case GgufType::kString:
    case GgufType::kArray:
      break;
  }
  return {};
}

}  // namespace

uint32_t GgmlTypeId(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 6;
    case DType::kQ5_1:
      return 7;
    case DType::kQ8_0:
      return 8;
    case DType::kQ4_K:
      return 12;
    case DType::kQ5_K:
      return 13;
    case DType::kQ6_K:
      return 14;
    case DType::kBF16:
      return 30;
    default:
      return 0;
  }
}

void GgufWriter::Kv(const std::string& key, GgufType type, const std::string& value) {
  kvs_.push_back(Str(key) + Pod(static_cast<uint32_t>(type)) + value);
}

void GgufWriter::AddU32(const std::string& key, uint32_t v) { Kv(key, GgufType::kU32, Pod(v)); }
void GgufWriter::AddI32(const std::string& key, int32_t v) { Kv(key, GgufType::kI32, Pod(v)); }
void GgufWriter::AddU64(const std::string& key, uint64_t v) { Kv(key, GgufType::kU64, Pod(v)); }
void GgufWriter::AddF32(const std::string& key, float v) { Kv(key, GgufType::kF32, Pod(v)); }
void GgufWriter::AddBool(const std::string& key, bool v) {
  Kv(key, GgufType::kBool, Pod(static_cast<uint8_t>(v)));
}
void GgufWriter::AddString(const std::string& key, const std::string& v) {
  Kv(key, GgufType::kString, Str(v));
}

void GgufWriter::AddStrings(const std::string& key, const std::vector<std::string>& v) {
  std::string b = Pod(static_cast<uint32_t>(GgufType::kString)) + Pod<uint64_t>(v.size());
  for (const std::string& s : v) b += Str(s);
  Kv(key, GgufType::kArray, b);
}

void GgufWriter::AddI32s(const std::string& key, const std::vector<int32_t>& v) {
  std::string b = Pod(static_cast<uint32_t>(GgufType::kI32)) + Pod<uint64_t>(v.size());
  for (int32_t x : v) b += Pod(x);
  Kv(key, GgufType::kArray, b);
}

void GgufWriter::AddF32s(const std::string& key, const std::vector<float>& v) {
  std::string b = Pod(static_cast<uint32_t>(GgufType::kF32)) + Pod<uint64_t>(v.size());
  for (float x : v) b += Pod(x);
  Kv(key, GgufType::kArray, b);
}

void GgufWriter::AddValue(const std::string& key, const GgufValue& v) {
  if (v.type == GgufType::kString) return AddString(key, v.text);
  if (v.type != GgufType::kArray) return Kv(key, v.type, Scalar(v.type, v.integer, v.real));
  if (v.element_type == GgufType::kString) return AddStrings(key, v.texts);
  std::string b = Pod(static_cast<uint32_t>(v.element_type)) + Pod<uint64_t>(v.array_size());
  for (int64_t x : v.integers) b += Scalar(v.element_type, x, 0.0);
  for (double x : v.reals) b += Scalar(v.element_type, 0, x);
  Kv(key, GgufType::kArray, b);
}

void GgufWriter::AddTensor(const std::string& name, uint32_t ggml_type,
                           const std::vector<int64_t>& shape, std::string bytes) {
  tensors_.push_back({name, ggml_type, shape, std::move(bytes)});
}

bool GgufWriter::FindInteger(const std::string& key, int64_t* value) const {
  for (const std::string& kv : kvs_) {
    uint64_t length = 0;
    std::memcpy(&length, kv.data(), sizeof length);
    if (kv.compare(sizeof length, length, key) != 0 || length != key.size()) continue;
    const size_t at = sizeof length + length;
    uint32_t type = 0;
    std::memcpy(&type, kv.data() + at, sizeof type);
    const char* v = kv.data() + at + sizeof type;
    auto read = [&](auto x) {
      std::memcpy(&x, v, sizeof x);
      *value = static_cast<int64_t>(x);
      return true;
    };
    switch (static_cast<GgufType>(type)) {
      case GgufType::kU8:
        return read(uint8_t{});
      case GgufType::kI8:
        return read(int8_t{});
      case GgufType::kU16:
        return read(uint16_t{});
      case GgufType::kI16:
        return read(int16_t{});
      case GgufType::kU32:
        return read(uint32_t{});
      case GgufType::kI32:
        return read(int32_t{});
      case GgufType::kU64:
        return read(uint64_t{});
      case GgufType::kI64:
        return read(int64_t{});
      default:
        return false;
    }
  }
  return false;
}

std::string GgufWriter::Bytes() const {
  const bool custom_alignment = alignment != 32;
  std::string out = "GGUF" + Pod(version) + Pod<uint64_t>(tensors_.size()) +
                    Pod<uint64_t>(kvs_.size() + (custom_alignment ? 1 : 0));
  for (const std::string& kv : kvs_) out += kv;
  if (custom_alignment) {
    out += Str("general.alignment") + Pod(static_cast<uint32_t>(GgufType::kU32)) + Pod(alignment);
  }
  uint64_t offset = 0;
  std::string data;
  for (const Tensor& t : tensors_) {
    out += Str(t.name) + Pod(static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) out += Pod(static_cast<uint64_t>(*d));
    out += Pod(t.type) + Pod(offset);
    data += t.bytes;
    offset += t.bytes.size();
    const uint64_t padded = (offset + alignment - 1) / alignment * alignment;
    data.append(padded - offset, '\0');
    offset = padded;
  }
  out.append((alignment - out.size() % alignment) % alignment, '\0');
  return out + data;
}

Status GgufWriter::Write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::InvalidArgument(path + ": cannot open for writing");
  const std::string bytes = Bytes();
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::InvalidArgument(path + ": write failed (disk full?)");
  return Status::Ok();
}

}  // namespace ssmkit
