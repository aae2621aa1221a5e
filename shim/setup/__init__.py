"""One training run's set-up: its settings (`config`: `TrainConfig`, checked against
shim/params.py), the data sets (`data`: Fashion-MNIST,
MNIST, CIFAR-10, digits, each checked as it loads), the models built by name with a deterministic
initialisation (`models`), and the `Problem` a run trains on: device, data on it, model, steps
(`problem`). It uses nothing of the exchange or the trainer above it."""
