"""Every node of an ONNX graph, the bodies of If/Loop/Scan included.

Why one walker: the op-support check, the ATC preparation, the opset down-conversion and the
ONNX Runtime fallback all have to see nodes hidden in subgraphs, or a refused op slips through.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The nodes of ``graph`` in order, each followed by the nodes of its subgraphs."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    yield from all_nodes(subgraph)
