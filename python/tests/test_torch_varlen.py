"""Packed sequences through ssmkit.torch: selective_scan_fn (cu_seqlens, seq_idx, per-sequence
initial states, varlen states), mamba_chunk_scan_combined (the same, with mamba_ssm's
return_varlen_states) and causal_conv1d_fn (seq_idx). A packed batch of sequences of different
lengths (1, and lengths that are multiples of no chunk size) equals each sequence run alone
through the float64 PyTorch references: outputs, final and varlen states, and the gradient of
every input by float64 autograd of the per-sequence references. opcheck on the packed forms of
the ops; the Mamba and Mamba2 modules on packed input against each sequence alone, including
a packed prefill's decode states.

Dimension legend: S sequences, L packed length, D channels, N state size, H heads, P head
dim, G groups, K conv width, E d_model."""
import pytest

torch = pytest.importorskip("torch")

import ssmkit  # noqa: E402
import ssmkit.torch as st  # noqa: E402
import torch_references as ref  # noqa: E402
from checks import assert_close  # noqa: E402

LENGTHS = (1, 7, 16, 3, 21)
S, L = len(LENGTHS), sum(LENGTHS)
TOL, GRAD_TOL = 2e-5, 1e-4


def offsets(dtype=torch.int32):
    return torch.tensor((0,) + LENGTHS, dtype=dtype).cumsum(0).to(dtype)


def seq_idx(rows=1):
    return torch.repeat_interleave(torch.arange(S, dtype=torch.int32),
                                   torch.tensor(LENGTHS))[None].repeat(rows, 1)


def pieces(t, dim):
    """The per-sequence slices of a packed tensor along `dim`."""
    return torch.split(t, LENGTHS, dim=dim)


def generator(rng):
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def normal(g, *shape, scale=1.0):
    return scale * torch.randn(*shape, generator=g)


def uniform(g, lo, hi, *shape):
    return lo + (hi - lo) * torch.rand(*shape, generator=g)


def as_np(t):
    return t.detach().double().numpy()


def check_against_alone(args, packed, alone, rng):
    """packed(args) (float32 ssmkit.torch) against alone(args in float64) (the references,
    one sequence at a time): every output, and the gradient of sum(output * cotangent) with
    respect to every floating input."""
    ours = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in args.items()}
    theirs = {k: (v.double() if v.is_floating_point() else v).requires_grad_(
        v.is_floating_point()) for k, v in args.items()}
    got, want = packed(ours), alone(theirs)
    assert len(got) == len(want)
    g = generator(rng)
    cotangents = [torch.randn(tuple(w.shape), generator=g, dtype=torch.float64) for w in want]
    for i, (o, w) in enumerate(zip(got, want)):
        assert o.dtype == torch.float32 and o.shape == w.shape, i
        assert_close(as_np(o), as_np(w), TOL, f"output {i}")
    sum((o.double() * c).sum() for o, c in zip(got, cotangents)).backward()
    sum((w * c).sum() for w, c in zip(want, cotangents)).backward()
    for k, v in ours.items():
        if v.is_floating_point():
            assert v.grad is not None and v.grad.dtype == torch.float32, k
            assert_close(as_np(v.grad), as_np(theirs[k].grad), GRAD_TOL, "d" + k)


# ------------------------------------------------------------------ selective scan (Mamba-1)

def scan_args(rng, D=6, N=4, rows=1, states=S):
    g = generator(rng)
    return dict(u=normal(g, rows, D, L), delta=uniform(g, -2.0, 0.5, rows, D, L),
                A=-torch.exp(uniform(g, -1.0, 1.5, D, N)), B=normal(g, rows, N, L),
                C=normal(g, rows, N, L), D=normal(g, D), z=normal(g, rows, D, L),
                delta_bias=uniform(g, -0.5, 0.5, D), initial_state=normal(g, states, D, N))


SCAN_SEQ = ("u", "delta", "B", "C", "z")  # packed along their last dim


def scan_alone(a, row=0, first_state_only=False):
    """out (1, D, L) and the last states (S, D, N) of row `row`: each sequence through the
    reference from initial_state[k] (or, first_state_only, from initial_state[row] for the
    first sequence and zeros for the others, as seq_idx packs)."""
    split = {k: pieces(a[k][row:row + 1], 2) for k in SCAN_SEQ}
    outs, states = [], []
    for k in range(S):
        h0 = a["initial_state"][(row if first_state_only else k):][:1]
        if first_state_only and k > 0:
            h0 = torch.zeros_like(h0)
        out, last = ref.selective_scan_fn(
            **{n: split[n][k] for n in SCAN_SEQ}, A=a["A"], D=a["D"],
            delta_bias=a["delta_bias"], delta_softplus=True, return_last_state=True,
            initial_state=h0)
        outs.append(out)
        states.append(last[0])
    return torch.cat(outs, 2), torch.stack(states)


@pytest.mark.parametrize("offsets_dtype", [torch.int32, torch.int64])
def test_scan_cu_seqlens_equals_alone(offsets_dtype, rng):
    """out, last_state and varlen_states (mamba_ssm's return order), per-sequence initial
    states, and gradients through all three outputs."""
    def packed(a):
        return st.selective_scan_fn(**a, delta_softplus=True, return_last_state=True,
                                    cu_seqlens=offsets(offsets_dtype),
                                    return_varlen_states=True)

    def alone(a):
        out, states = scan_alone(a)
        return out, states[-1:], states

    check_against_alone(scan_args(rng), packed, alone, rng)


def test_scan_seq_idx_rows_equal_alone(rng):
    """seq_idx with two rows: each row's first sequence starts from its initial_state row,
    the others from zeros; gradients included."""
    def packed(a):
        return st.selective_scan_fn(**a, delta_softplus=True, return_last_state=True,
                                    seq_idx=seq_idx(2))

    def alone(a):
        rows = [scan_alone(a, row=b, first_state_only=True) for b in range(2)]
        return (torch.cat([out for out, _ in rows]),
                torch.stack([states[-1] for _, states in rows]))

    check_against_alone(scan_args(rng, rows=2, states=2), packed, alone, rng)


def test_scan_varlen_states_alone_and_its_gradient(rng):
    """return_varlen_states without return_last_state returns (out, varlen_states); with the
    chunk states saved for the backward (an input requires grad) and without (no_grad)."""
    a = scan_args(rng)
    out, varlen = st.selective_scan_fn(**a, delta_softplus=True, cu_seqlens=offsets(),
                                       return_varlen_states=True)
    want_out, want_states = scan_alone({k: v.double() for k, v in a.items()})
    assert_close(as_np(out), as_np(want_out), TOL, "out")
    assert_close(as_np(varlen), as_np(want_states), TOL, "varlen_states")
    u = a["u"].clone().requires_grad_()
    _, varlen = st.selective_scan_fn(**dict(a, u=u), delta_softplus=True, cu_seqlens=offsets(),
                                     return_varlen_states=True)
    varlen.sum().backward()
    u64 = a["u"].double().requires_grad_()
    scan_alone(dict({k: v.double() for k, v in a.items()}, u=u64))[1].sum().backward()
    assert_close(as_np(u.grad), as_np(u64.grad), GRAD_TOL, "du through varlen_states alone")


# ------------------------------------------------------------------ SSD (Mamba-2)

def ssd_args(rng, H=4, P=3, G=2, N=4, per_head_dim_D=False):
    g = generator(rng)
    return dict(x=normal(g, 1, L, H, P), dt=uniform(g, -3.0, -0.5, 1, L, H),
                A=-torch.exp(uniform(g, 0.0, 1.5, H)), B=normal(g, 1, L, G, N),
                C=normal(g, 1, L, G, N), D=normal(g, H, P) if per_head_dim_D else normal(g, H),
                z=normal(g, 1, L, H, P), dt_bias=uniform(g, -0.5, 0.5, H),
                initial_states=normal(g, S, H, P, N))


SSD_SEQ = ("x", "dt", "B", "C", "z")  # packed along dim 1
SSD_OPTIONS = dict(dt_softplus=True, dt_limit=(0.02, 0.5))


def ssd_alone(a):
    split = {k: pieces(a[k], 1) for k in SSD_SEQ}
    outs, states = [], []
    for k in range(S):
        out, last = ref.mamba_chunk_scan_combined(
            **{n: split[n][k] for n in SSD_SEQ}, A=a["A"], D=a["D"], dt_bias=a["dt_bias"],
            initial_states=a["initial_states"][k:k + 1], return_final_states=True,
            **SSD_OPTIONS)
        outs.append(out)
        states.append(last[0])
    return torch.cat(outs, 1), torch.stack(states)


@pytest.mark.parametrize("with_seq_idx", [False, True], ids=["cu_seqlens", "both"])
@pytest.mark.parametrize("algorithm", ["chunked", "sequential"])
def test_ssd_cu_seqlens_equals_alone(with_seq_idx, algorithm, rng):
    """mamba_ssm's call (cu_seqlens with the matching seq_idx) and cu_seqlens alone: out,
    final_states and varlen_states in mamba_ssm's order, D per (head, headdim), dt_limit,
    per-sequence initial states, gradients through every output."""
    def packed(a):
        return st.mamba_chunk_scan_combined(
            **a, chunk_size=5, seq_idx=seq_idx() if with_seq_idx else None,
            cu_seqlens=offsets(), return_final_states=True, return_varlen_states=True,
            algorithm=algorithm, **SSD_OPTIONS)

    def alone(a):
        out, states = ssd_alone(a)
        return out, states[-1:], states

    check_against_alone(ssd_args(rng, per_head_dim_D=True), packed, alone, rng)


def test_ssd_varlen_states_without_final_states(rng):
    a = ssd_args(rng)
    got = st.mamba_chunk_scan_combined(**a, chunk_size=8, cu_seqlens=offsets(),
                                       return_varlen_states=True, **SSD_OPTIONS)
    assert isinstance(got, tuple) and len(got) == 2
    want_out, want_states = ssd_alone({k: v.double() for k, v in a.items()})
    assert_close(as_np(got[0]), as_np(want_out), TOL, "out")
    assert_close(as_np(got[1]), as_np(want_states), TOL, "varlen_states")


# ------------------------------------------------------------------ causal conv1d

def test_conv1d_seq_idx_equals_alone(rng):
    """Two rows packed by seq_idx: each sequence's window starts at its own first position
    (the first one of a row reads initial_states); gradients included."""
    g = generator(rng)
    D, K = 5, 4
    args = dict(x=normal(g, 2, D, L), weight=normal(g, D, K, scale=0.5),
                bias=normal(g, D, scale=0.5), initial_states=normal(g, 2, D, K - 1))

    def packed(a):
        return (st.causal_conv1d_fn(**a, seq_idx=seq_idx(2), activation="silu"),)

    def alone(a):
        rows = []
        for b in range(2):
            outs = [ref.causal_conv1d_fn(
                x, a["weight"], a["bias"], activation="silu",
                initial_states=a["initial_states"][b:b + 1] if k == 0 else None)
                for k, x in enumerate(pieces(a["x"][b:b + 1], 2))]
            rows.append(torch.cat(outs, 2))
        return (torch.cat(rows),)

    check_against_alone(args, packed, alone, rng)


# ------------------------------------------------------------------ opcheck


def test_opcheck_packed_forms(rng):
    """The custom ops' schema, fake and autograd registrations with the packing arguments,
    varlen outputs and their gradients."""
    a = {k: v.requires_grad_() for k, v in scan_args(rng).items()}
    fwd = (a["u"], a["delta"], a["A"], a["B"], a["C"], a["D"], a["z"], a["delta_bias"],
           a["initial_state"], None, offsets(), True, "sequential", 0, True, True)
    out, last, chunks, varlen = torch.ops.ssmkit.selective_scan_fwd(*fwd)
    detached = [t.detach() for t in fwd[:9]]
    samples = [
        (torch.ops.ssmkit.selective_scan_fwd, fwd),
        (torch.ops.ssmkit.selective_scan_fwd,
         (*fwd[:8], a["initial_state"][:1], seq_idx(), None, True, "chunked", 8, False,
          False)),
        (torch.ops.ssmkit.selective_scan_bwd,
         (torch.randn_like(out), torch.randn_like(last), torch.randn_like(varlen), *detached,
          None, offsets(), chunks.detach(), True, 0, [True] * 9)),
    ]
    s = {k: v.requires_grad_() for k, v in ssd_args(rng).items()}
    fwd = (s["x"], s["dt"], s["A"], s["B"], s["C"], s["D"], s["z"], s["dt_bias"],
           s["initial_states"], seq_idx(), offsets(torch.int64), True, 0.0, float("inf"),
           "auto", 8, True, True)
    out, final, varlen = torch.ops.ssmkit.ssd_fwd(*fwd)
    samples += [
        (torch.ops.ssmkit.ssd_fwd, fwd),
        (torch.ops.ssmkit.ssd_bwd,
         (torch.randn_like(out), torch.randn_like(final), torch.randn_like(varlen),
          *[t.detach() for t in fwd[:9]], *fwd[9:16], [True] * 9)),
    ]
    g = generator(rng)
    x, w = normal(g, 2, 5, L).requires_grad_(), normal(g, 5, 4).requires_grad_()
    samples += [
        (torch.ops.ssmkit.causal_conv1d_fwd, (x, w, None, None, seq_idx(2), True, False)),
        (torch.ops.ssmkit.causal_conv1d_bwd,
         (torch.randn(2, 5, L), None, x.detach(), w.detach(), None, None, seq_idx(2), True,
          [True, True, False, False])),
    ]
    for op, args in samples:
        torch.library.opcheck(op, args)


# ------------------------------------------------------------------ errors


def test_bad_packing_raises_the_op_message(rng):
    a = scan_args(rng, states=1)
    with pytest.raises(ssmkit.InvalidArgumentError, match="varlen_states"):
        st.selective_scan_fn(**a, return_varlen_states=True)  # no cu_seqlens
    two_rows = scan_args(rng, rows=2, states=2)
    with pytest.raises(ValueError, match="cu_seqlens"):
        st.selective_scan_fn(**two_rows, cu_seqlens=offsets())
    bad = offsets().clone()
    bad[2] = bad[1]
    s = ssd_args(rng)
    with pytest.raises(ValueError, match="cu_seqlens"):
        st.mamba_chunk_scan_combined(**s, cu_seqlens=bad)
    shifted = seq_idx()
    shifted[0, 1] = 0  # its second sequence starts one step late
    with pytest.raises(ValueError, match="seq_idx"):
        st.mamba_chunk_scan_combined(**s, cu_seqlens=offsets(), seq_idx=shifted)
    with pytest.raises(ValueError, match="seq_idx"):
        st.causal_conv1d_fn(normal(generator(rng), 1, 5, L), torch.ones(5, 4),
                            seq_idx=seq_idx().float())


# ------------------------------------------------------------------ modules


def mixer(arch):
    torch.manual_seed(11)
    if arch == "mamba1":
        return st.Mamba(24, d_state=8, layer_idx=0)
    return st.Mamba2(24, d_state=8, headdim=8, ngroups=2, chunk_size=8, layer_idx=0)


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("packing", ["cu_seqlens", "seq_idx"])
@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_module_packed_equals_each_sequence_alone(arch, packing, rng):
    """A module on a packed row equals the module on each sequence alone; so do the parameter
    gradients of a loss summed over the sequences."""
    model = mixer(arch)
    u = normal(generator(rng), 1, L, 24)
    packing_args = {"cu_seqlens": offsets()} if packing == "cu_seqlens" else {
        "seq_idx": seq_idx()}

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in model.parameters()]

    got = model(u, **packing_args)
    got_grads = grads((got * got).sum())
    want = torch.cat([model(x) for x in pieces(u, 1)], 1)
    want_grads = grads((want * want).sum())
    assert rel(got, want) < 1e-5
    for (name, _), g, w in zip(model.named_parameters(), got_grads, want_grads):
        assert rel(g, w) < 1e-4, name


@pytest.mark.parametrize("arch", ["mamba1", "mamba2"])
def test_module_packed_prefill_leaves_each_sequence_s_states(arch, rng):
    """mamba_ssm's varlen inference: a prefill with cu_seqlens leaves S rows of decode states
    (the conv windows of sequences shorter than the window zero-padded), and the next decode
    step of the S sequences equals the step after each sequence's own prefill."""
    model = mixer(arch)
    g = generator(rng)
    u, nxt = normal(g, 1, L, 24), normal(g, S, 1, 24)
    packed = st.InferenceParams(max_seqlen=L + 1, max_batch_size=S)
    with torch.no_grad():
        model(u, cu_seqlens=offsets(), inference_params=packed)
        prefilled = [s.clone() for s in packed.key_value_memory_dict[0]]
        packed.seqlen_offset = 1
        got = model(nxt, inference_params=packed)
        for k, x in enumerate(pieces(u, 1)):
            alone = st.InferenceParams(max_seqlen=x.shape[1] + 1, max_batch_size=1)
            model(x, inference_params=alone)
            for mine, theirs in zip(prefilled, alone.key_value_memory_dict[0]):
                assert mine.shape[0] == S
                assert rel(mine[k:k + 1], theirs) < 1e-5, f"sequence {k} state"
            alone.seqlen_offset = 1
            assert rel(got[k:k + 1], model(nxt[k:k + 1], inference_params=alone)) < 1e-5, k
