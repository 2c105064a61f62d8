"""A small Mamba network (mamba_model.py, plain jax.numpy) trained with Adam for 40 steps with
ssmkit.jax's ops and with the pure-JAX references: the two loss curves agree step by step,
and the loss falls."""
import numpy as np

import jax_references
import mamba_model
import ssmkit.jax as sj

STEPS = 40


def test_loss_curves_agree(rng):
    d_in, d_model, d_out, batch, length = 12, 16, 3, 4, 24
    params = mamba_model.init_params(rng, d_in, d_model, n_layers=2, d_out=d_out, d_state=8)
    batches = [(rng.standard_normal((batch, length, d_in)).astype(np.float32),
                rng.standard_normal((batch, length, d_out)).astype(np.float32))
               for _ in range(4)]
    ours = mamba_model.adam_train(sj, params, batches, STEPS)
    reference = mamba_model.adam_train(jax_references, params, batches, STEPS)
    print("ssmkit   ", np.array2string(ours[::5], precision=5))
    print("reference", np.array2string(reference[::5], precision=5))
    assert np.all(np.isfinite(ours))
    np.testing.assert_allclose(ours, reference, rtol=2e-3)
    # the network learns: the loss on the same 4 batches falls well below where it started
    assert ours[-4:].mean() < 0.8 * ours[:4].mean()
