#include "core/gguf.hpp"

#include <cstring>
#include <limits>

namespace ssmkit {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS

struct GgmlType {
  uint32_t id;
  const char* name;
  bool supported;
  DType dtype;
};

// GGML's type ids (ggml.h) with their names; the ones this library reads map to a DType.
constexpr GgmlType kGgmlTypes[] = {
    {0, "f32", true, DType::kF32},       {1, "f16", true, DType::kF16},
    {2, "q4_0", true, DType::kQ4_0},     {3, "q4_1", true, DType::kQ4_1},
    {6, "q5_0", true, DType::kQ5_0},     {7, "q5_1", true, DType::kQ5_1},
    {8, "q8_0", true, DType::kQ8_0},     {9, "q8_1", false, DType::kF32},
    {10, "q2_K", false, DType::kF32},    {11, "q3_K", false, DType::kF32},
    {12, "q4_K", true, DType::kQ4_K},    {13, "q5_K", true, DType::kQ5_K},
    {14, "q6_K", true, DType::kQ6_K},    {15, "q8_K", false, DType::kF32},
    {16, "iq2_xxs", false, DType::kF32}, {17, "iq2_xs", false, DType::kF32},
    {18, "iq3_xxs", false, DType::kF32}, {19, "iq1_s", false, DType::kF32},
    {20, "iq4_nl", false, DType::kF32},  {21, "iq3_s", false, DType::kF32},
    {22, "iq2_s", false, DType::kF32},   {23, "iq4_xs", false, DType::kF32},
    {24, "i8", false, DType::kF32},      {25, "i16", false, DType::kF32},
    {26, "i32", false, DType::kF32},     {27, "i64", false, DType::kF32},
    {28, "f64", false, DType::kF32},     {29, "iq1_m", false, DType::kF32},
    {30, "bf16", true, DType::kBF16},    {34, "tq1_0", false, DType::kF32},
    {35, "tq2_0", false, DType::kF32},   {39, "mxfp4", false, DType::kF32},
};

const GgmlType* FindGgmlType(uint32_t id) {
  for (const GgmlType& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

// Sequential little-endian reads over [data, data + size) that fail, rather than read past
// the end, with a message saying what was being read and where.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& label)
      : data_(data), size_(size), label_(label) {}

  size_t position() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  Status Error(const std::string& what) const {
    return Status::InvalidArgument(label_ + ": " + what + " (at byte " + std::to_string(pos_) +
                                   " of " + std::to_string(size_) + ")");
  }

  template <typename T>
  Status Read(const char* what, T* value) {
    if (left() < sizeof(T)) return Error(std::string("file ends inside ") + what);
    std::memcpy(value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(const char* what, std::string* s) {
    uint64_t length = 0;
    SSMKIT_RETURN_IF_ERROR(Read(what, &length));
    if (length > left()) {
      return Error(std::string(what) + ": length " + std::to_string(length) + " past the end");
    }
    s->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(length));
    pos_ += static_cast<size_t>(length);
    return Status::Ok();
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& label_;
};

// Bytes of one scalar of `type`; 0 for strings and arrays, -1 for an unknown type.
int ScalarSize(GgufType type) {
  switch (type) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return -1;
}

bool IsIntegerType(GgufType t) {
  return t != GgufType::kF32 && t != GgufType::kF64 && t != GgufType::kString &&
         t != GgufType::kArray;
}

// A scalar of a numeric type as (integer, real, is_unsigned).
template <typename T>
Status ReadNumber(Reader* r, const char* what, GgufValue* v) {
  T x{};
  SSMKIT_RETURN_IF_ERROR(r->Read(what, &x));
  if constexpr (std::is_floating_point_v<T>) {
    v->real = static_cast<double>(x);
  } else {
    v->integer = static_cast<int64_t>(x);
    v->is_unsigned = std::is_unsigned_v<T>;
  }
  return Status::Ok();
}

Status ReadScalar(Reader* r, GgufType type, const char* what, GgufValue* v) {
  switch (type) {
    case GgufType::kU8:
      return ReadNumber<uint8_t>(r, what, v);
    case GgufType::kI8:
      return ReadNumber<int8_t>(r, what, v);
    case GgufType::kU16:
      return ReadNumber<uint16_t>(r, what, v);
    case GgufType::kI16:
      return ReadNumber<int16_t>(r, what, v);
    case GgufType::kU32:
      return ReadNumber<uint32_t>(r, what, v);
    case GgufType::kI32:
      return ReadNumber<int32_t>(r, what, v);
    case GgufType::kU64:
      return ReadNumber<uint64_t>(r, what, v);
    case GgufType::kI64:
      return ReadNumber<int64_t>(r, what, v);
    case GgufType::kF32:
      return ReadNumber<float>(r, what, v);
    case GgufType::kF64:
      return ReadNumber<double>(r, what, v);
    case GgufType::kBool: {
      uint8_t b = 0;
      SSMKIT_RETURN_IF_ERROR(r->Read(what, &b));
      if (b > 1) return r->Error(std::string(what) + ": bool " + std::to_string(b));
      v->integer = b;
      return Status::Ok();
    }
    case GgufType::kString:
      return r->ReadString(what, &v->text);
    case GgufType::kArray:
      break;
  }
  return r->Error(std::string(what) + ": not a scalar type");
}

Status ReadValue(Reader* r, const std::string& key, GgufValue* v) {
  uint32_t raw_type = 0;
  SSMKIT_RETURN_IF_ERROR(r->Read("a metadata value type", &raw_type));
  v->type = static_cast<GgufType>(raw_type);
  const std::string what = "metadata '" + key + "'";
  if (ScalarSize(v->type) < 0) {
    return r->Error(what + ": unknown value type " + std::to_string(raw_type));
  }
  if (v->type != GgufType::kArray) return ReadScalar(r, v->type, what.c_str(), v);
  uint32_t raw_element = 0;
  uint64_t count = 0;
  SSMKIT_RETURN_IF_ERROR(r->Read("an array element type", &raw_element));
  SSMKIT_RETURN_IF_ERROR(r->Read("an array length", &count));
  v->element_type = static_cast<GgufType>(raw_element);
  const int element_size = ScalarSize(v->element_type);
  if (element_size < 0 || v->element_type == GgufType::kArray) {
    return r->Error(what + ": array of unsupported element type " + std::to_string(raw_element));
  }
  // Every element takes at least one byte (a string its 8-byte length): a count past the
  // bytes left is corrupt, and checking it first keeps the allocations below bounded.
  const uint64_t min_element = element_size == 0 ? 8 : static_cast<uint64_t>(element_size);
  if (count > r->left() / min_element) {
    return r->Error(what + ": array of " + std::to_string(count) + " elements past the end");
  }
  const size_t n = static_cast<size_t>(count);
  if (v->element_type == GgufType::kString) {
    v->texts.resize(n);
    for (size_t i = 0; i < n; ++i) {
      SSMKIT_RETURN_IF_ERROR(r->ReadString(what.c_str(), &v->texts[i]));
    }
    return Status::Ok();
  }
  const bool integer = IsIntegerType(v->element_type);
  (integer ? v->integers.reserve(n) : v->reals.reserve(n));
  for (size_t i = 0; i < n; ++i) {
    GgufValue element;
    SSMKIT_RETURN_IF_ERROR(ReadScalar(r, v->element_type, what.c_str(), &element));
    if (integer) {
      v->integers.push_back(element.integer);
    } else {
      v->reals.push_back(element.real);
    }
  }
  return Status::Ok();
}

Status ReadTensorInfo(Reader* r, GgufTensor* t) {
  SSMKIT_RETURN_IF_ERROR(r->ReadString("a tensor name", &t->name));
  const std::string what = "tensor '" + t->name + "'";
  uint32_t n_dims = 0;
  SSMKIT_RETURN_IF_ERROR(r->Read("a tensor's dimension count", &n_dims));
  if (n_dims < 1 || n_dims > kMaxDims) {
    return r->Error(what + ": " + std::to_string(n_dims) + " dimensions, expected 1 to " +
                    std::to_string(kMaxDims));
  }
  std::vector<int64_t> ne(n_dims);
  int64_t numel = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    uint64_t d = 0;
    SSMKIT_RETURN_IF_ERROR(r->Read("a tensor dimension", &d));
    if (d < 1 || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        static_cast<int64_t>(d) > std::numeric_limits<int64_t>::max() / numel) {
      return r->Error(what + ": dimension " + std::to_string(d) +
                      " (each must be >= 1, the element count must fit 63 bits)");
    }
    ne[i] = static_cast<int64_t>(d);
    numel *= ne[i];
  }
  t->shape.assign(ne.rbegin(), ne.rend());
  SSMKIT_RETURN_IF_ERROR(r->Read("a tensor type", &t->ggml_type));
  SSMKIT_RETURN_IF_ERROR(r->Read("a tensor offset", &t->offset));
  const GgmlType* type = FindGgmlType(t->ggml_type);
  if (type == nullptr) {
    return r->Error(what + ": unknown GGML type " + std::to_string(t->ggml_type));
  }
  t->supported = type->supported;
  t->dtype = type->dtype;
  if (!t->supported) return Status::Ok();
  const int64_t block = DTypeBlockElements(t->dtype);
  if (ne[0] % block != 0) {
    return r->Error(what + ": " + GgmlTypeName(t->ggml_type) + " rows of " + std::to_string(ne[0]) +
                    " elements, not a multiple of its block of " + std::to_string(block));
  }
  if (ne[0] / block > std::numeric_limits<int64_t>::max() / DTypeBlockBytes(t->dtype)) {
    return r->Error(what + ": a row of " + std::to_string(ne[0]) +
                    " elements overflows its byte size");
  }
  const int64_t row_bytes = DTypeRowBytes(t->dtype, ne[0]);
  if (numel / ne[0] > std::numeric_limits<int64_t>::max() / row_bytes) {
    return r->Error(what + ": byte size overflows");
  }
  t->nbytes = numel / ne[0] * row_bytes;
  return Status::Ok();
}

std::string ValueKind(const GgufValue& v) {
  if (v.type == GgufType::kArray) {
    return std::string("an array of ") + GgufTypeName(v.element_type);
  }
  return std::string("a ") + GgufTypeName(v.type);
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kU8:
      return "u8";
    case GgufType::kI8:
      return "i8";
    case GgufType::kU16:
      return "u16";
    case GgufType::kI16:
      return "i16";
    case GgufType::kU32:
      return "u32";
    case GgufType::kI32:
      return "i32";
    case GgufType::kF32:
      return "f32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "u64";
    case GgufType::kI64:
      return "i64";
    case GgufType::kF64:
      return "f64";
  }
  return "unknown";
}

std::string GgmlTypeName(uint32_t ggml_type) {
  const GgmlType* t = FindGgmlType(ggml_type);
  return t ? t->name : "type " + std::to_string(ggml_type);
}

bool GgufValue::is_integer() const { return type != GgufType::kArray && IsIntegerType(type); }

bool GgufValue::is_real() const { return type == GgufType::kF32 || type == GgufType::kF64; }

int64_t GgufValue::array_size() const {
  if (type != GgufType::kArray) return 0;
  if (element_type == GgufType::kString) return static_cast<int64_t>(texts.size());
  return static_cast<int64_t>(IsIntegerType(element_type) ? integers.size() : reals.size());
}

Status GgufFile::Open(const std::string& path, GgufFile* file) {
  GgufFile f;
  SSMKIT_RETURN_IF_ERROR(MappedFile::Open(path, &f.map_));
  SSMKIT_RETURN_IF_ERROR(Parse(f.map_.data(), f.map_.size(), path, &f));
  *file = std::move(f);
  return Status::Ok();
}

Status GgufFile::Parse(const uint8_t* data, size_t size, const std::string& label, GgufFile* file) {
  file->label_ = label;
  file->metadata_.clear();
  file->tensors_.clear();
  file->tensor_index_.clear();
  Reader r(data, size, file->label_);
  uint32_t magic = 0;
  SSMKIT_RETURN_IF_ERROR(r.Read("the magic number", &magic));
  if (magic != kMagic) return r.Error("not a GGUF file (the first 4 bytes are not \"GGUF\")");
  SSMKIT_RETURN_IF_ERROR(r.Read("the version", &file->version_));
  if (file->version_ != 2 && file->version_ != 3) {
    return r.Error("GGUF version " + std::to_string(file->version_) + ", expected 2 or 3");
  }
  uint64_t tensor_count = 0, metadata_count = 0;
  SSMKIT_RETURN_IF_ERROR(r.Read("the tensor count", &tensor_count));
  SSMKIT_RETURN_IF_ERROR(r.Read("the metadata count", &metadata_count));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor info
  // 8 + 4 + 8 + 4 + 8: counts above what the bytes can hold are corrupt.
  if (metadata_count > r.left() / 13) {
    return r.Error(std::to_string(metadata_count) + " metadata entries past the end");
  }
  for (uint64_t i = 0; i < metadata_count; ++i) {
    std::string key;
    SSMKIT_RETURN_IF_ERROR(r.ReadString("a metadata key", &key));
    GgufValue value;
    SSMKIT_RETURN_IF_ERROR(ReadValue(&r, key, &value));
    if (!file->metadata_.emplace(key, std::move(value)).second) {
      return r.Error("metadata key '" + key + "' appears twice");
    }
  }
  if (const GgufValue* a = file->Find("general.alignment")) {
    if (a->type != GgufType::kU32 || a->integer < 1 || (a->integer & (a->integer - 1)) != 0) {
      return r.Error("general.alignment must be a u32 power of two, got " + ValueKind(*a) +
                     (a->is_integer() ? " " + std::to_string(a->integer) : ""));
    }
    file->alignment_ = a->integer;
  }
  if (tensor_count > r.left() / 32) {
    return r.Error(std::to_string(tensor_count) + " tensors past the end");
  }
  file->tensors_.resize(static_cast<size_t>(tensor_count));
  for (size_t i = 0; i < file->tensors_.size(); ++i) {
    SSMKIT_RETURN_IF_ERROR(ReadTensorInfo(&r, &file->tensors_[i]));
    if (!file->tensor_index_.emplace(file->tensors_[i].name, i).second) {
      return r.Error("tensor '" + file->tensors_[i].name + "' appears twice");
    }
  }
  const uint64_t align = static_cast<uint64_t>(file->alignment_);
  const uint64_t data_start = (r.position() + align - 1) / align * align;
  if (data_start > size && !file->tensors_.empty()) {
    return r.Error("the data section starts past the end of the file");
  }
  const uint64_t data_bytes = data_start > size ? 0 : size - data_start;
  for (GgufTensor& t : file->tensors_) {
    const std::string what = "tensor '" + t.name + "'";
    if (t.offset % align != 0) {
      return Status::InvalidArgument(label + ": " + what + ": offset " + std::to_string(t.offset) +
                                     " not a multiple of the alignment " + std::to_string(align));
    }
    if (!t.supported) continue;
    if (t.offset > data_bytes || static_cast<uint64_t>(t.nbytes) > data_bytes - t.offset) {
      return Status::InvalidArgument(
          label + ": " + what + ": bytes [" + std::to_string(t.offset) + ", " +
          std::to_string(t.offset + static_cast<uint64_t>(t.nbytes)) +
          ") past the end of the data section (" + std::to_string(data_bytes) + " bytes)");
    }
    t.data = data + data_start + t.offset;
    const int64_t element = DTypeSize(t.dtype);
    if (element > 1 && reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(element)) {
      return Status::InvalidArgument(label + ": " + what + ": data not aligned to its " +
                                     std::to_string(element) + "-byte elements");
    }
  }
  return Status::Ok();
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::FindTensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::KeyError(const std::string& key, const std::string& what) const {
  return Status::InvalidArgument(label_ + ": metadata key '" + key + "' " + what);
}

Status GgufFile::GetString(const std::string& key, std::string* value) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (v->type != GgufType::kString)
    return KeyError(key, "is " + ValueKind(*v) + ", expected a string");
  *value = v->text;
  return Status::Ok();
}

Status GgufFile::GetInteger(const std::string& key, int64_t* value) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (!v->is_integer() || v->type == GgufType::kBool) {
    return KeyError(key, "is " + ValueKind(*v) + ", expected an integer");
  }
  if (v->is_unsigned && v->integer < 0) return KeyError(key, "does not fit 63 bits");
  *value = v->integer;
  return Status::Ok();
}

Status GgufFile::GetReal(const std::string& key, double* value) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (v->is_real()) {
    *value = v->real;
  } else if (v->is_integer() && v->type != GgufType::kBool) {
    *value = static_cast<double>(v->integer);
  } else {
    return KeyError(key, "is " + ValueKind(*v) + ", expected a number");
  }
  return Status::Ok();
}

Status GgufFile::GetBool(const std::string& key, bool* value) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (v->type != GgufType::kBool) return KeyError(key, "is " + ValueKind(*v) + ", expected a bool");
  *value = v->integer != 0;
  return Status::Ok();
}

Status GgufFile::GetStrings(const std::string& key, const std::vector<std::string>** values) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (v->type != GgufType::kArray || v->element_type != GgufType::kString) {
    return KeyError(key, "is " + ValueKind(*v) + ", expected an array of strings");
  }
  *values = &v->texts;
  return Status::Ok();
}

Status GgufFile::GetIntegers(const std::string& key, const std::vector<int64_t>** values) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return KeyError(key, "is missing");
  if (v->type != GgufType::kArray || !IsIntegerType(v->element_type)) {
    return KeyError(key, "is " + ValueKind(*v) + ", expected an array of integers");
  }
  *values = &v->integers;
  return Status::Ok();
}

}  // namespace ssmkit
