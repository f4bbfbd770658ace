"""The option sets every registered cell is tested with by ``test_cell_contract.py``.

Each registered name maps to a list of variants: ``(id, options)`` or ``(id, options, input_size)``
when the cell needs a particular input size. The first variant is the cell's defaults. A cell that
is registered but missing here fails ``test_every_registered_cell_has_variants``.
"""

VARIANTS: dict[str, list[tuple]] = {
    # --- DSF / Delta-RNN (delta.py) ---
    "delta-rnn": [
        ("default", {}),
        ("eq8-elman-data-gate", {"inner": "elman"}),
        ("eq10-second-order", {"inner": "second-order"}),
        ("eq4-fixed-gate", {"gate": "fixed"}),
        ("tanh-outer", {"outer_activation": "tanh"}),
        ("relu-outer", {"outer_activation": "relu"}),
        ("eq12-dropout", {"dropout": 0.3}),
    ],
    "delta-rnn-simple": [("default", {}), ("relu-outer", {"outer_activation": "relu"})],
    "delta-rnn-ln": [("default", {}), ("tanh-outer", {"outer_activation": "tanh"})],
    # --- SCRN (scrn.py) ---
    "scrn": [
        ("default", {}),
        ("sec6.1-hidden-output", {"output": "hidden"}),
        ("learned-alpha", {"learn_alpha": True, "alpha": 0.9}),
        ("tanh-no-bias-ctx3", {"hidden_activation": "tanh", "bias": False, "context_size": 3}),
        ("alpha0", {"alpha": 0.0}),
    ],
    # --- RAN (ran.py) ---
    "ran": [("default", {}), ("identity-g", {"g": "identity"})],
    "ran-simple": [("default", {}, 6)],
    # --- IRLM (irlm.py) ---
    "irlm": [
        ("default", {}),
        ("sec5.3-lcu", {"long_context_units": 4}),
        ("all-lcu-custom-range", {"long_context_units": 6, "long_context_range": [0.5, 0.95], "long_context_init": 0.8}),
        ("r-init-negative", {"r_init": -0.5}),
        ("direct-r-lcu", {"r_parametrization": "direct", "long_context_units": 3, "r_init": 0.2}),
    ],
    # --- baselines (classic.py) ---
    "elman": [
        ("default", {}),
        ("relu", {"activation": "relu"}),
        ("sigmoid", {"activation": "sigmoid"}),
        ("identity", {"activation": "identity"}),
    ],
    "mi-rnn": [("default", {}), ("relu", {"activation": "relu"})],
    "lstm": [
        ("default", {}),
        ("peepholes", {"peepholes": True}),
        ("dsf-eq16-17-matrix-peepholes", {"peepholes": "matrix"}),
        ("forget-bias-0", {"forget_bias": 0.0}),
    ],
    "gru": [("default", {}), ("reset-after", {"reset_after": True})],
    "mgu": [("default", {})],
    "srelu-rnn": [("default", {}), ("a-0.5-bias", {"a": 0.5, "bias": True})],
    # --- state regularization (state_reg.py) ---
    "sr": [
        ("default", {}),  # over delta-rnn
        ("eq4-distance", {"score": "distance"}),
        ("eq5-sample", {"mode": "sample", "k": 4}),
        ("hard-argmax", {"mode": "hard", "tau": 0.5}),
        ("elman-delta-k3", {"base_options": {"inner": "elman"}, "k": 3, "tau": 2.0}),
        ("lstm-h", {"base": "lstm", "k": 5}),
        ("lstm-c-base-output", {"base": "lstm", "state_index": 1, "output": "base"}),
        ("gru-distance-sample", {"base": "gru", "score": "distance", "mode": "sample"}),
    ],
    "sr-gru": [("default", {}), ("eq4-distance", {"score": "distance"}), ("hard", {"mode": "hard", "k": 3})],
    "sr-lstm": [("default", {}), ("eq5-sample", {"mode": "sample"}), ("distance", {"score": "distance"})],
    "sr-lstm-p": [("default", {}), ("hard", {"mode": "hard"}), ("k2-tau0.5", {"k": 2, "tau": 0.5})],
}
