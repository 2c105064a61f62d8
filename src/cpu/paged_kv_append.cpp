// PagedKvAppend on the CPU: new keys and values copied into their cache rows, converted to the
// cache's dtype (f32 <-> bf16, rounded to nearest even). A copy, memory bound: rows split over
// threads in chunks large enough that a decode step (B * Hk rows) stays on the calling thread.
// Dimension legend: B batch, L new tokens, Hk kv heads, E / Ev head dims.
#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/attention.hpp"
#include "cpu/thread_scratch.hpp"

namespace ssmkit::cpu {
namespace {

// Tuned for speed, does not affect the result: elements per thread at least.
constexpr int64_t kMinChunkElements = 64 * 1024;

// One (E)-wide row from `src` (any dtype) at src_offset to `dst` at dst_offset; a conversion
// goes through `row` (width floats).
void CopyRow(const HeadsSeqView& src, int64_t src_offset, const HeadsSeqView& dst,
             int64_t dst_offset, int64_t width, float* row) {
  if (src.dtype == dst.dtype) {
    const int64_t size = DTypeSize(src.dtype);
    std::memcpy(static_cast<char*>(dst.data) + dst_offset * size,
                static_cast<const char*>(src.data) + src_offset * size,
                static_cast<size_t>(width * size));
    return;
  }
  RowToF32(src.data, src.dtype, src_offset, width, row);
  RowFromF32(row, width, dst.data, dst.dtype, dst_offset);
}

}  // namespace

Status PagedKvAppend(const PagedAppendParams& p) {
  const PagedKvView& c = p.cache;
  const int64_t tokens = p.batch * p.new_len;
  const int64_t per_token = p.kv_heads * (p.head_dim + p.v_head_dim);
  const int64_t chunks =
      std::max<int64_t>(1, std::min(tokens, tokens * per_token / kMinChunkElements));
  ParallelFor(chunks, [&](int64_t begin, int64_t end, int) {
    const bool convert = p.k.dtype != c.k_blocks.dtype || p.v.dtype != c.v_blocks.dtype;
    float* row = convert
                     ? ThreadScratch(ScratchSlot::kPagedKvRow, std::max(p.head_dim, p.v_head_dim))
                     : nullptr;
    for (int64_t n = tokens * begin / chunks; n < tokens * end / chunks; ++n) {
      const int64_t b = n / p.new_len, i = n % p.new_len;
      const int64_t pos = c.seq_lens[b * c.seq_lens_stride] - p.new_len + i;
      if (pos < 0) continue;  // a left-pad row
      const int64_t block = c.block_table[b * c.table_stride + pos / c.block_size];
      for (int64_t hk = 0; hk < p.kv_heads; ++hk) {
        CopyRow(p.k, p.k.Offset(b, i, hk), c.k_blocks,
                c.k_blocks.Offset(block, pos % c.block_size, hk), p.head_dim, row);
        CopyRow(p.v, p.v.Offset(b, i, hk), c.v_blocks,
                c.v_blocks.Offset(block, pos % c.block_size, hk), p.v_head_dim, row);
      }
    }
  });
  return Status::Ok();
}

}  // namespace ssmkit::cpu
