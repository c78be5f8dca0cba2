"""Example npuctl plug-in (tests/plugins/example_npu): see backend.py and catalog/."""
