"""The fake bindings (fake_wit) have the names and shapes of the real ones: componentize-py's
``bindings`` output for wit/, in the folder ``$RECONCILED_PY_BINDINGS`` (test.sh makes it).
Skipped without it."""

import inspect
import json
import os
import subprocess
import sys
import unittest

import fake_wit

# Prints {module: {name: shape}} for the classes and functions each module defines.
DUMP = r"""
import dataclasses, enum, importlib, inspect, json, sys
out = {}
for name in sys.argv[1:]:
    m = importlib.import_module(name)
    shapes = {}
    for attr, obj in vars(m).items():
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        if isinstance(obj, type) and issubclass(obj, enum.Enum):
            shapes[attr] = ["enum"] + [e.name for e in obj]
        elif dataclasses.is_dataclass(obj):
            shapes[attr] = ["dataclass"] + [f.name for f in dataclasses.fields(obj)]
        elif inspect.isfunction(obj):
            shapes[attr] = ["function", len(inspect.signature(obj).parameters)]
        elif isinstance(obj, type):
            shapes[attr] = ["class"]
    out[name] = shapes
print(json.dumps(out))
"""


def shape(obj):
    import dataclasses
    import enum

    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return ["enum"] + [e.name for e in obj]
    if dataclasses.is_dataclass(obj):
        return ["dataclass"] + [f.name for f in dataclasses.fields(obj)]
    if inspect.isfunction(obj):
        return ["function", len(inspect.signature(obj).parameters)]
    if isinstance(obj, type):
        return ["class"]
    return None


@unittest.skipUnless(os.environ.get("RECONCILED_PY_BINDINGS"), "set RECONCILED_PY_BINDINGS to componentize-py bindings output")
@unittest.skipIf(sys.version_info < (3, 11), "the generated bindings import typing.Self, new in Python 3.11")
class TestBindings(unittest.TestCase):
    def test_fake_matches_the_generated_bindings(self):
        modules = [m for m in fake_wit.MODULES if m.startswith("wit_world")]
        real = json.loads(
            subprocess.run(
                [sys.executable, "-c", DUMP, *modules],
                env={**os.environ, "PYTHONPATH": os.environ["RECONCILED_PY_BINDINGS"]},
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        for module, shapes in real.items():
            for name, want in shapes.items():
                with self.subTest(module=module, name=name):
                    self.assertIn(name, fake_wit.MODULES[module], f"{module}.{name} is missing from the fake")
                    self.assertEqual(shape(fake_wit.MODULES[module][name]), want)


if __name__ == "__main__":
    unittest.main()
