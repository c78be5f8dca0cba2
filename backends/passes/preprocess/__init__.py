"""The preprocess stage: the app's raw frame folded into the model.

- stage: the pass that builds the preprocessing graph in front of the model's input;
- plan: the spec's preprocess section resolved against the model's input, and its NumPy reference;
- forms: that one canonical form converted to each toolchain's own convention.
"""
