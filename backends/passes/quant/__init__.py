"""The quantize stage and what it is built from.

- stage: the stage itself (ptq, fp16, qat), and modes, policy, check (its modes, the spec's
  quantization section resolved against the target, the artifact's check against the float model);
- calibration, channel_ranges, bias_correction, recurrent: activation ranges from samples, the
  per-channel range check, the ptq bias correction, recurrent weights;
- qdq_build, qdq_names, qdq_placement, float_keep: the QDQ models built, named, where quantizers go,
  and nodes kept in float;
- auto_search, point_search, region_search, points, weight_signal, sensitivity, search_set: the
  sensitive-layer search (which points and layers stay in float under an accuracy budget).
"""
