"""After training, on a node under the run's own interpreter: what needs the run's libraries
(torch, the RL library, onnx and onnxruntime), which the CLI never imports. Those are imported
only inside the functions here (the rank side is stdlib only where it is imported)."""
