"""The multi-process runtime: stage workers on torch.distributed (gloo on CPU, nccl on CUDA)."""
