"""Reading rknn-toolkit2's layer table and mapping its layer names back to ONNX nodes."""

from __future__ import annotations

from backends.rknn.layer_table import node_of, parse

# rows as rknn-toolkit2 2.5.0 prints them (colour codes included), from a build of the PP-OCR classifier
LOG = """\
D RKNN: [09:11:18.493] ID   OpType             DataType Target InputShape    OutputShape   Cycles(DDR/NPU/Total)    RW(KB)       FullName
\x1b[1;33mD\x1b[0m RKNN: [09:11:18.493] Network Layer Information Table
D RKNN: [09:11:18.493] ID   OpType             DataType Target InputShape    OutputShape   Cycles(DDR/NPU/Total)    RW(KB)       FullName
D RKNN: [09:11:18.493] 0    InputOperator      FLOAT16  CPU    \\             (1,3,48,192)  0/0/0     0    InputOperator:x
D RKNN: [09:11:18.493] 1    ConvHardSwish      FLOAT16  NPU    (1,3,48,192),(8,3,3,3),(8)  (1,8,24,96)  3948/20736/20736  55  Conv:Conv@0
D RKNN: [09:11:18.493] 4    Conv               FLOAT16  NPU    (1,8,12,96),(1,8,7,7),(8)  (1,8,2,14)  837/1568/1568  18  Conv:GlobalAveragePool@0_2conv0
D RKNN: [09:11:18.493] 95   Reshape            FLOAT16  CPU    (1,2,1,1),(2)  (1,2)  0/0/0  0  Reshape:linear_1.tmp_0_rs
D RKNN: [09:11:18.493] 96   OutputOperator     FLOAT16  CPU    (1,2)   \\   0/0/0   0   OutputOperator:y
D RKNN: [09:11:18.493] ----------------------------------------------------------------
D RKNN: [09:11:18.498] 89  ConvHardSwish   conv_last_weights   FLOAT16   (200,32,1,1) | 0x00027f00 0x0002b100 0x00003200
D RKNN: [09:11:18.499] Total Internal Memory Size: 519.75KB
D RKNN: [09:11:18.499] Total Weight Memory Size: 1.5MB
"""


def test_the_last_table_and_the_memory_totals_are_read() -> None:
    table = parse(LOG)
    assert table is not None
    assert [layer.index for layer in table.layers] == [0, 1, 4, 95, 96]
    assert [layer.full_name for layer in table.compute_layers] == [
        "Conv:Conv@0",
        "Conv:GlobalAveragePool@0_2conv0",
        "Reshape:linear_1.tmp_0_rs",
    ]
    assert table.cycles == 20736 + 1568
    assert (table.internal_kb, table.weight_kb) == (519.75, 1.5 * 1024)


def test_a_log_without_a_table_reads_as_none() -> None:
    assert parse("I rknn building done.\n") is None


def test_layer_names_map_to_the_longest_node_name_before_a_toolkit_suffix() -> None:
    names = {"Conv@1", "Conv@11", "GlobalAveragePool@0", "a_b"}
    assert node_of("Conv@11_ConvAdd", names) == "Conv@11"
    assert node_of("GlobalAveragePool@0_2conv0", names) == "GlobalAveragePool@0"
    assert node_of("MatMul@0#2", names) is None
    assert node_of("a_b_2conv1", names) == "a_b"
    assert node_of("linear_1.tmp_0_rs", names) is None
