"""GTA-Workflow's checkpoint judge, as the official evaluator scores a deliverable.

GTA-2's ``GPTEvaluator`` (open-compass/GTA, ``opencompass/datasets/gta_bench_v2.py``) walks a
task's checkpoint tree depth first, asks an LLM to score each leaf from 0 to 10 with the
task, the final answer, the requirement and every deliverable file attached, and takes each
internal node as the weighted mean of its children. :mod:`.protocol` holds the pure parts
(the tree, the prompt, the reply parser, which file goes how), :mod:`.walk` the walk itself,
:mod:`.files` the conversions (HTML and text to PDF, video to frames), :mod:`.client` the
official transport (the Files API and the Responses API), the local variant for judges that
only speak chat completions and where a judge is reached, and :mod:`.deadline` the one
deadline of each checkpoint's call (``--gta-judge-timeout``).
"""
