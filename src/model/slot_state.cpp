// A slot's whole state as bytes (Session::SaveSlot / RestoreSlot), for a prefix cache.
//
// Layout (native byte order; the buffer is for this machine's sessions, not a file format):
//   header   SlotHeader below: magic, version, the model's shape fingerprint, the slot's length
//            and the sizes that follow
//   states   per Mamba block: conv state (C (K - 1) f32), SSM state (D N f32)
//   keys and values   per attention block, per token t < length: keys (Hk E f32), values
//            (Hk Ev f32)
// Dimension legend: C conv channels, K conv width, D d_inner, N state size, Hk key/value heads,
// E / Ev key / value head dims.
#include <cstring>
#include <string>

#include "model/session_impl.hpp"

namespace ssmkit {
namespace {

constexpr char kMagic[8] = {'s', 's', 'm', 'k', 's', 'l', 'o', 't'};
constexpr int64_t kVersion = 1;

struct SlotHeader {
  char magic[8];
  int64_t version;
  uint64_t fingerprint;  // the model's shapes (below): a buffer from another model is refused
  int64_t length;        // tokens the slot holds
  int64_t ssm_blocks, conv_floats, ssm_floats;
  int64_t kv_layers, key_floats, value_floats;  // per token and layer
};

// FNV-1a over the numbers that fix the state's layout and meaning.
uint64_t Fingerprint(const ModelConfig& c) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (int64_t v : {static_cast<int64_t>(c.arch), c.d_model, c.n_layer, c.vocab_size, c.d_inner,
                    c.d_state, c.d_conv, c.dt_rank, c.nheads, c.headdim, c.ngroups,
                    c.attention.num_heads, c.attention.num_kv_heads, c.attention.head_dim}) {
    mix(v);
  }
  for (const BlockSpec& b : c.block_list()) {
    mix(static_cast<int64_t>(b.kind));
    mix(b.layer);
  }
  return h;
}

SlotHeader HeaderFor(const Session::Impl& s, int64_t length) {
  SlotHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.fingerprint = Fingerprint(s.config());
  h.length = length;
  h.ssm_blocks = s.states.blocks();
  h.conv_floats = s.states.conv_floats();
  h.ssm_floats = s.states.ssm_floats();
  h.kv_layers = s.kv.layers();
  h.key_floats = s.kv.kv_heads() * s.kv.head_dim();
  h.value_floats = s.kv.kv_heads() * s.kv.v_head_dim();
  return h;
}

int64_t BytesFor(const SlotHeader& h) {
  return static_cast<int64_t>(sizeof(SlotHeader)) +
         4 * (h.ssm_blocks * (h.conv_floats + h.ssm_floats) +
              h.kv_layers * h.length * (h.key_floats + h.value_floats));
}

// Calls visit(state memory, bytes) for each piece of a slot's state, in the buffer's order.
template <class Visit>
void ForEachPiece(const Session::Impl& s, int64_t slot, const SlotHeader& h, Visit&& visit) {
  for (int64_t i = 0; i < h.ssm_blocks; ++i) {
    visit(s.states.conv(i, slot, 1).data, 4 * h.conv_floats);
    visit(s.states.ssm(i, slot, 1).data, 4 * h.ssm_floats);
  }
  for (int64_t l = 0; l < h.kv_layers; ++l) {
    for (int64_t t = 0; t < h.length; ++t) {
      visit(s.kv.key(l, slot, t), 4 * h.key_floats);
      visit(s.kv.value(l, slot, t), 4 * h.value_floats);
    }
  }
}

Status CheckSlot(const Session& s, int64_t slot, const char* fn) {
  if (slot < 0 || slot >= s.max_batch()) {
    return Status::InvalidArgument(std::string(fn) + ": slot " + std::to_string(slot) +
                                   " outside [0, " + std::to_string(s.max_batch()) + ")");
  }
  return Status::Ok();
}

}  // namespace

Status Session::SlotStateBytes(int64_t slot, int64_t* bytes) const {
  SSMKIT_RETURN_IF_ERROR(impl_->CpuOnly("slot state"));
  SSMKIT_RETURN_IF_ERROR(CheckSlot(*this, slot, "slot state"));
  *bytes = BytesFor(HeaderFor(*impl_, impl_->lengths[slot]));
  return Status::Ok();
}

Status Session::SaveSlot(int64_t slot, std::span<uint8_t> buffer, int64_t* bytes_written) const {
  SSMKIT_RETURN_IF_ERROR(impl_->CpuOnly("save slot"));
  SSMKIT_RETURN_IF_ERROR(CheckSlot(*this, slot, "save slot"));
  const Impl& s = *impl_;
  const SlotHeader h = HeaderFor(s, s.lengths[slot]);
  const int64_t bytes = BytesFor(h);
  if (static_cast<int64_t>(buffer.size()) < bytes) {
    return Status::InvalidArgument("save slot: buffer: expected " + std::to_string(bytes) +
                                   " bytes (SlotStateBytes), given " +
                                   std::to_string(buffer.size()));
  }
  uint8_t* p = buffer.data();
  std::memcpy(p, &h, sizeof h);
  p += sizeof h;
  ForEachPiece(s, slot, h, [&](const void* piece, int64_t n) {
    std::memcpy(p, piece, static_cast<size_t>(n));
    p += n;
  });
  *bytes_written = bytes;
  return Status::Ok();
}

Status Session::RestoreSlot(int64_t slot, std::span<const uint8_t> buffer) {
  SSMKIT_RETURN_IF_ERROR(impl_->CpuOnly("restore slot"));
  SSMKIT_RETURN_IF_ERROR(CheckSlot(*this, slot, "restore slot"));
  Impl& s = *impl_;
  SlotHeader h;
  if (buffer.size() < sizeof h) {
    return Status::InvalidArgument("restore slot: buffer of " + std::to_string(buffer.size()) +
                                   " bytes: shorter than a slot state's header");
  }
  std::memcpy(&h, buffer.data(), sizeof h);
  const SlotHeader want = HeaderFor(s, h.length);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion) {
    return Status::InvalidArgument("restore slot: not a slot state saved by SaveSlot");
  }
  if (h.fingerprint != want.fingerprint || h.ssm_blocks != want.ssm_blocks ||
      h.conv_floats != want.conv_floats || h.ssm_floats != want.ssm_floats ||
      h.kv_layers != want.kv_layers || h.key_floats != want.key_floats ||
      h.value_floats != want.value_floats) {
    return Status::InvalidArgument(
        "restore slot: the state was saved from a model of another shape");
  }
  if (h.length < 0 || (h.kv_layers > 0 && h.length > s.kv.max_context())) {
    return Status::InvalidArgument("restore slot: " + std::to_string(h.length) +
                                   " tokens, outside [0, " + std::to_string(s.kv.max_context()) +
                                   "] (the session's max_context)");
  }
  if (static_cast<int64_t>(buffer.size()) < BytesFor(h)) {
    return Status::InvalidArgument("restore slot: buffer: expected " + std::to_string(BytesFor(h)) +
                                   " bytes for " + std::to_string(h.length) + " tokens, given " +
                                   std::to_string(buffer.size()));
  }
  s.Reset(slot);
  if (h.kv_layers > 0) SSMKIT_RETURN_IF_ERROR(s.kv.Reserve(slot, h.length));
  const uint8_t* p = buffer.data() + sizeof h;
  ForEachPiece(s, slot, h, [&](void* piece, int64_t n) {
    std::memcpy(piece, p, static_cast<size_t>(n));
    p += n;
  });
  s.lengths[slot] = h.length;
  return Status::Ok();
}

}  // namespace ssmkit
