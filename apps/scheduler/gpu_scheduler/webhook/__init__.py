"""The admission webhook: injects CUDA_VISIBLE_DEVICES and checks maps at admission."""
