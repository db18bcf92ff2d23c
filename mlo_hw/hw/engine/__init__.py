"""The layer engine's components: each a ``wiring.Component`` with its interface and timing in its docstring,
tested alone (``tests/``), assembled by :class:`mlo_hw.hw.layer_engine.LayerEngine`. See docs/architecture.md."""
