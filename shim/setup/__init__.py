"""One training run's set-up: its settings (`config`: `TrainConfig`, each field's default there
and what it may hold in shim/params.py), the best measured recipe's defaults (`recipe`), the
data sets (`data`: Fashion-MNIST, MNIST, CIFAR-10, digits, each checked as it loads), the models
built by name with a deterministic initialisation (`models`), and the `Problem` a run trains
on: device, data on it, model, steps (`problem`). It uses nothing of the exchange or the trainer
above it."""
