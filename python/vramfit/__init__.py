"""vramfit's Python side: the tracer (``python -m vramfit.trace``), which runs frameworks'
training code on a fake CUDA device for `vramfit trace`."""
