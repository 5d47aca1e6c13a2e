"""Front end: what users declare, and the facade that drives the pipeline.

Enters: init parameters, torch tensors and layer calls (``pk.<task>_layer``). Leaves: a compiled,
launched kernel; on the way it hands a TaskGraph to graph/, a source to build/, and a compiled
graph, a module and bound tensors to run/.

    kernel.py    PersistentKernel (the public facade)
    params.py    init parameters: defaults and validation
    meta.py      the eleven meta tensors: shapes, defaults, validation of overrides
    meta_contents.py  what the given ones hold (history, prompts, stop lengths, page order) against the settings
    layers.py    the generated layer methods and the checks of a layer call
    lowering.py  declared graph -> source, compiled graph, signature
"""
