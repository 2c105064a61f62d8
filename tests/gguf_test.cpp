// The GGUF reader (src/core/gguf.hpp): a file with every metadata type, arrays, tensors of
// several ranks and types and a custom alignment reads back exactly; each kind of defect (bad
// magic or version, every truncation, counts and lengths past the end, unknown types, bad
// dimensions, misaligned or out-of-range offsets, repeated keys and names, rows that are not a
// block multiple, a bad alignment) is an error naming the file, never a crash.
#include "core/gguf.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/gguf_writer.hpp"

namespace ssmkit::testing {
namespace {

Status ParseBytes(const std::string& bytes, GgufFile* file) {
  return GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "t.gguf",
                         file);
}

// A buffer whose start is 64-byte aligned, as a file mapping's is (so that the reader's
// alignment check sees what it would on a real file).
struct Aligned {
  explicit Aligned(const std::string& bytes) : storage(bytes.size() + 64) {
    const uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
    data = storage.data() + ((64 - base % 64) % 64);
    std::memcpy(data, bytes.data(), bytes.size());
    size = bytes.size();
  }
  std::vector<uint8_t> storage;
  uint8_t* data;
  size_t size;
};

Status ParseAligned(const Aligned& a, GgufFile* file) {
  return GgufFile::Parse(a.data, a.size, "t.gguf", file);
}

void AddF32Tensor(GgufWriter* w, const std::string& name, const std::vector<int64_t>& shape,
                  const std::vector<float>& values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  w->AddTensor(name, 0, shape, bytes);
}

GgufWriter ValidWriter() {
  GgufWriter w;
  w.AddString("general.architecture", "mamba");
  w.AddU32("mamba.block_count", 2);
  w.AddF32("mamba.attention.layer_norm_rms_epsilon", 1e-5f);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddU64("big", 1ull << 40);
  w.AddI32("negative", -7);
  w.AddStrings("tokenizer.ggml.tokens", {"a", "b", "\xc4\xa0the"});
  w.AddI32s("tokenizer.ggml.token_type", {1, 1, 3});
  std::vector<float> matrix(3 * 4);
  for (size_t i = 0; i < matrix.size(); ++i) matrix[i] = 0.5f * static_cast<float>(i) - 2.0f;
  AddF32Tensor(&w, "m", {3, 4}, matrix);
  AddF32Tensor(&w, "v", {5}, {1, 2, 3, 4, 5});
  std::string q8(34 * 2, '\x01');  // two Q8_0 blocks: a (1, 64) row
  w.AddTensor("q", 8, {1, 64}, q8);
  w.AddTensor("q5", 6, {1, 32}, std::string(22, '\x02'));  // one Q5_0 block
  w.AddTensor("unsupported_q3_k", 11, {256}, std::string(110, '\0'));
  return w;
}

TEST(Gguf, ReadsMetadataTensorsAndAlignment) {
  for (uint32_t alignment : {32u, 64u, 8u}) {
    GgufWriter w = ValidWriter();
    w.alignment = alignment;
    const Aligned bytes(w.Bytes());
    GgufFile f;
    const Status s = ParseAligned(bytes, &f);
    ASSERT_TRUE(s.ok()) << "alignment " << alignment << ": " << s.message();
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    std::string arch;
    ASSERT_TRUE(f.GetString("general.architecture", &arch).ok());
    EXPECT_EQ(arch, "mamba");
    int64_t i = 0;
    ASSERT_TRUE(f.GetInteger("mamba.block_count", &i).ok());
    EXPECT_EQ(i, 2);
    ASSERT_TRUE(f.GetInteger("big", &i).ok());
    EXPECT_EQ(i, int64_t{1} << 40);
    ASSERT_TRUE(f.GetInteger("negative", &i).ok());
    EXPECT_EQ(i, -7);
    double r = 0;
    ASSERT_TRUE(f.GetReal("mamba.attention.layer_norm_rms_epsilon", &r).ok());
    EXPECT_EQ(static_cast<float>(r), 1e-5f);
    bool b = false;
    ASSERT_TRUE(f.GetBool("tokenizer.ggml.add_bos_token", &b).ok());
    EXPECT_TRUE(b);
    const std::vector<std::string>* tokens = nullptr;
    ASSERT_TRUE(f.GetStrings("tokenizer.ggml.tokens", &tokens).ok());
    EXPECT_EQ(*tokens, (std::vector<std::string>{"a", "b", "\xc4\xa0the"}));
    const std::vector<int64_t>* types = nullptr;
    ASSERT_TRUE(f.GetIntegers("tokenizer.ggml.token_type", &types).ok());
    EXPECT_EQ(*types, (std::vector<int64_t>{1, 1, 3}));

    const GgufTensor* m = f.FindTensor("m");
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->shape, (std::vector<int64_t>{3, 4}));  // ne (4, 3): 3 rows of 4
    EXPECT_TRUE(m->supported);
    EXPECT_EQ(m->dtype, DType::kF32);
    EXPECT_EQ(m->nbytes, 48);
    const float* mv = reinterpret_cast<const float*>(m->data);
    for (int k = 0; k < 12; ++k) EXPECT_EQ(mv[k], 0.5f * static_cast<float>(k) - 2.0f);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data) % alignment, 0u);
    const GgufTensor* v = f.FindTensor("v");
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(reinterpret_cast<const float*>(v->data)[4], 5.0f);
    const GgufTensor* q = f.FindTensor("q");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->dtype, DType::kQ8_0);
    EXPECT_EQ(q->shape, (std::vector<int64_t>{1, 64}));
    EXPECT_EQ(q->nbytes, 68);
    const GgufTensor* q5 = f.FindTensor("q5");
    ASSERT_NE(q5, nullptr);
    EXPECT_EQ(q5->dtype, DType::kQ5_0);
    EXPECT_EQ(q5->nbytes, 22);
    const GgufTensor* u = f.FindTensor("unsupported_q3_k");
    ASSERT_NE(u, nullptr);
    EXPECT_FALSE(u->supported);
    EXPECT_EQ(GgmlTypeName(u->ggml_type), "q3_K");
  }
}

TEST(Gguf, TypedLookupsNameTheKeyAndTheTypes) {
  const Aligned bytes(ValidWriter().Bytes());
  GgufFile f;
  ASSERT_TRUE(ParseAligned(bytes, &f).ok());
  int64_t i = 0;
  std::string s;
  Status st = f.GetInteger("general.architecture", &i);
  EXPECT_NE(st.message().find("t.gguf: metadata key 'general.architecture' is a string, expected "
                              "an integer"),
            std::string::npos)
      << st.message();
  st = f.GetString("absent", &s);
  EXPECT_NE(st.message().find("'absent' is missing"), std::string::npos) << st.message();
  const std::vector<std::string>* strings = nullptr;
  st = f.GetStrings("tokenizer.ggml.token_type", &strings);
  EXPECT_NE(st.message().find("is an array of i32, expected an array of strings"),
            std::string::npos)
      << st.message();
}

// Every proper prefix of a valid file fails with a message naming it (and no read past the
// prefix: ASan would see it, the copy below holding exactly the prefix).
TEST(Gguf, EveryTruncationIsAnError) {
  const std::string full = ValidWriter().Bytes();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string prefix = full.substr(0, n);
    std::vector<uint8_t> exact(prefix.begin(), prefix.end());
    GgufFile f;
    const Status s = GgufFile::Parse(exact.data(), exact.size(), "t.gguf", &f);
    // A prefix that ends inside the padding after the last tensor's data can still be whole.
    if (s.ok()) {
      for (const GgufTensor& t : f.tensors()) {
        if (t.supported) ASSERT_LE(t.data + t.nbytes, exact.data() + exact.size()) << n;
      }
      continue;
    }
    EXPECT_EQ(s.message().rfind("t.gguf: ", 0), 0u) << n << ": " << s.message();
  }
}

void ExpectError(const std::string& bytes, const std::string& expected) {
  const Aligned a(bytes);
  GgufFile f;
  const Status s = ParseAligned(a, &f);
  ASSERT_FALSE(s.ok()) << "expected an error containing: " << expected;
  EXPECT_NE(s.message().find(expected), std::string::npos) << s.message();
}

// Offset of the first byte after the header's fixed fields (magic, version, two counts).
constexpr size_t kFixed = 4 + 4 + 8 + 8;

TEST(Gguf, HeaderDefects) {
  std::string b = ValidWriter().Bytes();
  ExpectError("GGUX" + b.substr(4), "not a GGUF file");
  GgufWriter old = ValidWriter();
  old.version = 1;
  ExpectError(old.Bytes(), "GGUF version 1, expected 2 or 3");
  std::string counts = b;
  const uint64_t huge = ~0ull >> 1;
  std::memcpy(&counts[16], &huge, 8);  // metadata count
  ExpectError(counts, "metadata entries past the end");
  counts = b;
  std::memcpy(&counts[8], &huge, 8);  // tensor count
  ExpectError(counts, "tensors past the end");
  std::string key = b;
  const uint64_t long_key = 1ull << 40;
  std::memcpy(&key[kFixed], &long_key, 8);
  ExpectError(key, "a metadata key: length 1099511627776 past the end");
}

TEST(Gguf, ValueDefects) {
  GgufWriter w;
  w.AddU32("k", 1);
  std::string b = w.Bytes();
  const size_t type_at = kFixed + 8 + 1;  // key "k"
  std::string t = b;
  t[type_at] = 13;
  ExpectError(t, "metadata 'k': unknown value type 13");
  GgufWriter boolean;
  boolean.AddBool("flag", true);
  t = boolean.Bytes();
  t[kFixed + 8 + 4 + 4] = 2;
  ExpectError(t, "bool 2");
  GgufWriter arr;
  arr.AddI32s("a", {1, 2, 3});
  t = arr.Bytes();
  const uint64_t huge = 1ull << 60;
  std::memcpy(&t[kFixed + 8 + 1 + 4 + 4], &huge, 8);
  ExpectError(t, "metadata 'a': array of 1152921504606846976 elements past the end");
  t = arr.Bytes();
  const uint32_t nested = 9;
  std::memcpy(&t[kFixed + 8 + 1 + 4], &nested, 4);
  ExpectError(t, "array of unsupported element type 9");
  GgufWriter twice;
  twice.AddU32("k", 1);
  twice.AddU32("k", 2);
  ExpectError(twice.Bytes(), "metadata key 'k' appears twice");
  GgufWriter align;
  align.alignment = 24;
  ExpectError(align.Bytes(), "general.alignment must be a u32 power of two");
}

TEST(Gguf, TensorDefects) {
  auto one = [](uint32_t type, std::vector<int64_t> shape, std::string bytes) {
    GgufWriter w;
    w.AddTensor("x", type, shape, bytes);
    return w.Bytes();
  };
  ExpectError(one(0, {}, ""), "tensor 'x': 0 dimensions, expected 1 to 4");
  ExpectError(one(0, {1, 1, 1, 1, 1}, std::string(4, '\0')), "5 dimensions");
  ExpectError(one(0, {0}, ""), "dimension 0 (each must be >= 1");
  ExpectError(one(0, {int64_t{1} << 32, int64_t{1} << 32}, ""),
              "the element count must fit 63 bits");
  ExpectError(one(99, {4}, std::string(16, '\0')), "unknown GGML type 99");
  ExpectError(one(8, {48}, std::string(34, '\0')),
              "q8_0 rows of 48 elements, not a multiple of its block of 32");
  ExpectError(one(12, {128}, std::string(144, '\0')), "not a multiple of its block of 256");
  // Data past the end: a (4,) f32 tensor whose bytes are cut off.
  std::string cut = one(0, {4}, std::string(16, '\0'));
  cut.resize(cut.size() - 16 - 8);  // the padding to 32 bytes, then half the data
  ExpectError(cut, "tensor 'x': bytes [0, 16) past the end of the data section");
  // A misaligned offset, and one past the data.
  std::string off = one(0, {4}, std::string(16, '\0'));
  const size_t offset_at = kFixed + 8 + 1 + 4 + 8 + 4;
  const uint64_t odd = 4, far = 1ull << 40;
  std::memcpy(&off[offset_at], &odd, 8);
  ExpectError(off, "offset 4 not a multiple of the alignment 32");
  std::memcpy(&off[offset_at], &far, 8);
  ExpectError(off, "past the end of the data section");
  GgufWriter twice;
  AddF32Tensor(&twice, "x", {1}, {1});
  AddF32Tensor(&twice, "x", {1}, {2});
  ExpectError(twice.Bytes(), "tensor 'x' appears twice");
  // An f32 tensor whose data is not 4-byte aligned (a file with alignment 1 and an odd offset).
  GgufWriter unaligned;
  unaligned.alignment = 1;
  unaligned.AddTensor("b", 24, {3}, "abc");  // i8: not read by this library, sized 3
  unaligned.AddTensor("f", 0, {1}, std::string(4, '\0'));
  std::string u = unaligned.Bytes();
  GgufFile f;
  const Aligned a(u);
  // Whether "f" lands aligned depends on the header's length; shift it by one byte otherwise.
  if (ParseAligned(a, &f).ok()) {
    const GgufTensor* ft = f.FindTensor("f");
    ASSERT_NE(ft, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ft->data) % 4, 0u);
  } else {
    ExpectError(u, "data not aligned to its 4-byte elements");
  }
}

}  // namespace
}  // namespace ssmkit::testing
