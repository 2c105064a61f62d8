/* The NIF library Elixir.Ssmkit.NIF loads: atoms, resource types, the check that the
 * libssmkit.so found at run time speaks the ABI this NIF was compiled against, and the table of
 * functions (their Elixir side is lib/ssmkit/nif.ex). */
#include "nif.h"

static int load(ErlNifEnv* env, void** priv, ERL_NIF_TERM info) {
  (void)priv;
  (void)info;
  if (ssmkit_abi_version() != SSMKIT_ABI_VERSION) return 1;
  atoms.ok = enif_make_atom(env, "ok");
  atoms.error = enif_make_atom(env, "error");
  atoms.nil = enif_make_atom(env, "nil");
  atoms.true_ = enif_make_atom(env, "true");
  atoms.false_ = enif_make_atom(env, "false");
  atoms.f = enif_make_atom(env, "f");
  atoms.bf = enif_make_atom(env, "bf");
  atoms.s = enif_make_atom(env, "s");
  atoms.u = enif_make_atom(env, "u");
  atoms.token = enif_make_atom(env, "token");
  atoms.done = enif_make_atom(env, "done");
  return nif_state_init(env) && nif_model_init(env) && nif_stream_init(env) ? 0 : 1;
}

/* Stream threads may still run: the library must never be unloaded under them, so upgrades
 * (a second load of the module) keep this copy's resource types and the old code stays. */
static int upgrade(ErlNifEnv* env, void** priv, void** old_priv, ERL_NIF_TERM info) {
  (void)old_priv;
  return load(env, priv, info);
}

static ErlNifFunc funcs[] = {
    {"selective_scan_fwd", 1, nif_scan_fwd, 0},
    {"selective_scan_bwd", 1, nif_scan_bwd, 0},
    {"ssd_fwd", 1, nif_ssd_fwd, 0},
    {"ssd_bwd", 1, nif_ssd_bwd, 0},
    {"causal_conv1d_fwd", 1, nif_conv_fwd, 0},
    {"causal_conv1d_bwd", 1, nif_conv_bwd, 0},
    {"rmsnorm_fwd", 1, nif_rmsnorm_fwd, 0},
    {"rmsnorm_bwd", 1, nif_rmsnorm_bwd, 0},
    {"add_rmsnorm_fwd", 1, nif_add_rmsnorm_fwd, 0},
    {"add_rmsnorm_bwd", 1, nif_add_rmsnorm_bwd, 0},
    {"linear_fwd", 1, nif_linear_fwd, 0},
    {"linear_bwd", 1, nif_linear_bwd, 0},
    {"set_num_threads", 1, nif_set_num_threads, 0},
    {"num_threads", 0, nif_num_threads, 0},
    {"set_bf16_products", 1, nif_set_bf16_products, 0},
    {"bf16_products", 0, nif_bf16_products, 0},
    {"versions", 0, nif_versions, 0},
    {"live_counts", 0, nif_live_counts, 0},
    {"state_new", 1, nif_state_new, 0},
    {"state_from_tensor", 1, nif_state_from_tensor, 0},
    {"state_to_tensor", 1, nif_state_to_tensor, 0},
    {"state_release", 1, nif_state_release, 0},
    {"selective_state_update", 2, nif_state_update, 0},
    {"causal_conv1d_update", 2, nif_conv_update, 0},
    {"model_load", 1, nif_model_load, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"model_load_default", 0, nif_model_load_default, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"model_config", 1, nif_model_config, 0},
    {"tokenizer_encode", 2, nif_tokenizer_encode, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"tokenizer_decode", 3, nif_tokenizer_decode, 0},
    {"session_new", 2, nif_session_new, ERL_NIF_DIRTY_JOB_CPU_BOUND},
    {"session_prefill", 2, nif_session_prefill, 0},
    {"session_decode", 2, nif_session_decode, 0},
    {"stream_start", 4, nif_stream_start, 0},
    {"stream_cancel", 1, nif_stream_cancel, 0},
    {"tokens_to_channels", 2, nif_to_channels, 0},
    {"channels_to_tokens", 1, nif_to_tokens, 0},
    {"add", 2, nif_add, 0},
    {"mamba1_net_fwd", 1, nif_mamba1_net_fwd, 0},
};

ERL_NIF_INIT(Elixir.Ssmkit.NIF, funcs, load, NULL, upgrade, NULL)
