"""What backends share: same-value rewrites into operators a delegate takes (``rewrite``,
``decomposed``), operators written out as the one they are (``fuse``), pattern graphs made
only where one can match (``patterns``), a program in half precision (``fp16``) and the
reference interpreter a backend's simulators plug into (``simulate``). A folder, so
discovery does not take it for a backend."""
