"""The hardware: Amaranth components of the layer engine, its AXI masters and slave, and its blocks.

Generic blocks (``axi``, ``weight_dma``, ``act_dma``, ``axi_interconnect``, ``mvau``, ``softmax``,
``layernorm``, ``gelu``, ``divide``), the weight stream (``loop_ctrl``, ``buffers``), the registers
(``regs``), and the engine assembled from them (``layer_engine``, with its components in ``engine``).
See docs/architecture.md."""
