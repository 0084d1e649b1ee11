"""Names the compiled module's entries carry, read by the backends that run it (no TVM import)."""

# main_transform_params with the weights as separate arguments (see passes/flat_transform.py).
FLAT_TRANSFORM = "transform_params_flat"

# The blocks (and kernels) of the Winograd input and output transforms (passes/winograd.py), which
# the Winograd rule (rules/winograd.py) schedules.
WINOGRAD_INPUT = "winograd_input"
WINOGRAD_OUTPUT = "winograd_output"
# ... and of the input transform's zero padding, which the rule inlines into the transform.
WINOGRAD_PAD = "winograd_pad"
# ... and of the products between them, which the Contraction rule schedules.
WINOGRAD_PRODUCT = "winograd_product"
# ... and the output transform's annotation with a dilated convolution's dilation (rows, columns).
WINOGRAD_DILATION = "tvmbench.winograd_dilation"
