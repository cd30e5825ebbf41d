"""A user's plugin backend for the acceptance tests: ``conv_act`` takes a Conv and the
element-wise activations that follow it (HardSigmoid, Relu, Clip, Mul, Add), as an integration
for a conv accelerator would. Loaded with ``sglens serve --plugin tests/acceptance/plugin_conv_act.py``."""

from partition import SubgraphProperty, SubgraphSelector, register_subgraph_property

ACTIVATIONS = {"Relu", "HardSigmoid", "Clip", "Mul", "Add", "Sigmoid"}


class ConvAct(SubgraphSelector):
    def select(self, node):
        return node.op_type == "Conv"

    def select_input(self, node, producer):
        return False

    def select_output(self, node, consumer):
        return consumer.op_type in ACTIVATIONS


class ConvActProperty(SubgraphProperty):
    property_name = "conv_act"

    def create_subgraph_selector(self):
        return ConvAct()


register_subgraph_property("conv_act", ConvActProperty())
