"""Where models come from: the catalog (torchvision, Ultralytics) and custom sources."""
