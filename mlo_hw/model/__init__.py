"""The integer model: the arithmetic the RTL and the golden model share (``numerics``), the golden model
(``golden``), the float reference (``reference``), post-training quantization (``quantize``) and the DRAM
weight image (``weight_image``). No hardware here. See docs/numerics.md."""
