"""Operation implementations shared by the NLP and CV search spaces.

``common``: salted seeded dropout, once-per-step batch norm, label-smoothed cross-entropy.
``seq``: the Evolved-Transformer style sequence operations (convolutions, lightweight
convolution, self/cross attention, GLU), each usable bidirectionally or causally.
``vision``: the AmoebaNet style image operations (ReLU-conv-BN family, pools, identity).

Every op here is deterministic on the CPU and has a deterministic CUDA implementation under
``torch.use_deterministic_algorithms(True)``: attention is matmul + softmax, no adaptive
pooling, no scatter/index_add in backward paths, no ``nll_loss``.
"""
