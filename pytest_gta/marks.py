"""The text ``pytest --markers`` shows for each GTA marker.

Kept apart from :mod:`pytest_gta.runner` (which imports the scoring code and NumPy) because the
entry module registers the markers in every session, GTA or not.
"""

from __future__ import annotations

_MARK_TEXT = {
    "gta_mode_step": "GTA cases in step-by-step mode (the model predicts each reference step)",
    "gta_mode_e2e": "GTA cases in end-to-end mode (the model drives the tools itself)",
    "gta_type_objective": "GTA queries whose answer is matched against whitelist/blacklist",
    "gta_type_subjective": "GTA queries whose answer is scored by similarity to references",
    "gta_type_image": "GTA image-generation queries (scored on the image tools' arguments)",
}


def describe_mark(name: str) -> str:
    """The ``pytest --markers`` text of a GTA marker, one per marker."""
    from pytest_gta.dataset import CATEGORIES

    if name == "gta":
        return "every GTA case (pytest-gta); marks exist only with --gta-model"
    if name in _MARK_TEXT:
        return _MARK_TEXT[name]
    if name.startswith("gta_category_"):
        category = name.removeprefix("gta_category_")
        tools = ", ".join(CATEGORIES.get(category, ()))
        return f"GTA queries whose reference chain uses a {category} tool ({tools})"
    if name.startswith("gta_tool_"):
        return f"GTA queries whose reference chain calls {name.removeprefix('gta_tool_')}"
    return "selects GTA cases (pytest-gta)"
