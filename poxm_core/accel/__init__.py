"""The accelerator code, apart from the plain path it speeds up (docs/performance.md):

  static.py        sync-free pieces: `static_unique` (a fixed-shape unique) and `BagSum` (an
                   EmbeddingBag whose backward is an index_add); no host synchronisation, no
                   data-dependent shape, so that a training step can be captured in a CUDA graph
  triton_adam.py   the fused Triton kernels of Adam (row-wise for the output layers, dense for the
                   network stack); each checks itself on first use against the plain update
                   (poxm_core/optim/adam.py) and steps aside on a mismatch or where Triton is missing
  graph.py         the CUDA-graph runner of the training loop: one training step
                   (poxm_core/training/step.py) captured once and replayed for an epoch's full batches

No module outside this package imports Triton or captures a CUDA graph. The plain path is always
there: on a CPU, without Triton, or with POXM_CUDA_GRAPHS=0 the same steps run without any of this.
"""
