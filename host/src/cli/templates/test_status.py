import unittest

from status import desired_status


class DesiredStatus(unittest.TestCase):
    def test_the_status_echoes_the_spec_at_its_generation(self):
        obj = {"metadata": {"generation": 3}, "spec": {"message": "hello"}}
        self.assertEqual(desired_status(obj), {"message": "reconciled: hello", "observedGeneration": 3})


if __name__ == "__main__":
    unittest.main()
