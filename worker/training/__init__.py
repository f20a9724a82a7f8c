"""What a training job does around the fit: grid search, held-out evaluation, failures on
parameters."""
