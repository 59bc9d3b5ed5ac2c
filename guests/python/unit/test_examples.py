"""The Python examples, reconciled against the fake host: what examples/reservation/README.md
says each reconcile writes, and the configmap-generator's status by server-side apply. The
shared fixtures (``reconciled test``) hold every language to the same; these run without wasm."""

import importlib.util
import os
import unittest

import fake_wit  # installs the fake bindings; before reconciled_guest

from reconciled_guest import Kinds, Outcome, gvk
from test_sdk import at

SERVER = fake_wit.SERVER
EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "examples")
RESERVATION = gvk("example.reconciled.dev/v1alpha1", "Reservation")
GENERATOR = gvk("example.reconciled.dev/v1alpha1", "ConfigMapGenerator")
FIN = "example.reconciled.dev/release"


def load(example: str):
    """The example's ``app`` module, under a name of its own (every example's module is ``app``)."""
    spec = importlib.util.spec_from_file_location(example.replace("-", "_"), os.path.join(EXAMPLES, example, "app.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.WitWorld()


reservation = load("reservation-py")
generator = load("configmap-generator-py")
REQUEST = fake_wit.Request("default", "training")
READY_TRUE = {
    "type": "Ready",
    "status": "True",
    "reason": "Reserved",
    "message": "2 slots reserved in ConfigMap gpus",
    "observedGeneration": 1,
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


def seed_reservation(metadata=None, status=None):
    obj = {"metadata": {"name": "training", "namespace": "default", "generation": 1, **(metadata or {})}, "spec": {"pool": "gpus", "slots": 2}}
    if status is not None:
        obj["status"] = status
    return SERVER.seed(RESERVATION, obj)


def summary():
    return [(w["fn"], w["kind"].split("/")[-1], w["name"], w.get("patch", {}).get("type"), w.get("patch", {}).get("body")) for w in SERVER.writes()]


class TestReservation(unittest.TestCase):
    def setUp(self):
        SERVER.reset()
        self.clock = at("2026-01-01T00:00:00Z")
        self.clock.start()
        self.addCleanup(self.clock.stop)

    def test_a_new_reservation(self):
        seed_reservation()
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "gpus", "namespace": "default"}})
        self.assertEqual(reservation.reconcile(REQUEST), Outcome.done())
        self.assertEqual(
            summary(),
            [
                (
                    "patch",
                    "Reservation",
                    "training",
                    "json",
                    [{"op": "test", "path": "/metadata/finalizers", "value": None}, {"op": "add", "path": "/metadata/finalizers", "value": [FIN]}],
                ),
                ("patch", "ConfigMap", "gpus", "merge", {"data": {"training": "2"}}),
                (
                    "patch_status",
                    "Reservation",
                    "training",
                    "apply",
                    {
                        "apiVersion": "example.reconciled.dev/v1alpha1",
                        "kind": "Reservation",
                        "metadata": {"name": "training", "namespace": "default"},
                        "status": {"observedGeneration": 1, "conditions": [READY_TRUE]},
                    },
                ),
            ],
        )
        status = SERVER.writes()[2]["patch"]
        self.assertEqual((status["field_manager"], status["force"]), ("reservation", True))
        self.assertEqual([e["event"] for e in SERVER.events()], [{"type": "normal", "reason": "Reserved", "message": "2 slots reserved in ConfigMap gpus"}])

    def test_converged_writes_nothing(self):
        seed_reservation({"finalizers": [FIN]}, {"observedGeneration": 1, "conditions": [READY_TRUE]})
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "gpus", "namespace": "default"}, "data": {"training": "2"}})
        self.assertEqual(reservation.reconcile(REQUEST), Outcome.done())
        self.assertEqual(SERVER.writes(), [])
        self.assertEqual(SERVER.events(), [])

    def test_a_missing_pool(self):
        seed_reservation({"finalizers": [FIN]})
        reservation.reconcile(REQUEST)
        missing = {
            "type": "Ready",
            "status": "False",
            "reason": "PoolMissing",
            "message": "ConfigMap gpus does not exist",
            "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        self.assertEqual([(w[0], w[4]["status"]) for w in summary()], [("patch_status", {"observedGeneration": 1, "conditions": [missing]})])
        self.assertEqual([e["event"] for e in SERVER.events()], [{"type": "warning", "reason": "PoolMissing", "message": "ConfigMap gpus does not exist"}])

    def test_a_new_generation_rewrites_the_status_without_an_event(self):
        seed_reservation({"finalizers": [FIN], "generation": 2}, {"observedGeneration": 1, "conditions": [{**READY_TRUE, "lastTransitionTime": "2025-06-01T00:00:00Z"}]})
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "gpus", "namespace": "default"}, "data": {"training": "2"}})
        reservation.reconcile(REQUEST)
        self.assertEqual(
            [(w[0], w[4]["status"]) for w in summary()],
            [("patch_status", {"observedGeneration": 2, "conditions": [{**READY_TRUE, "observedGeneration": 2, "lastTransitionTime": "2025-06-01T00:00:00Z"}]})],
        )
        self.assertEqual(SERVER.events(), [])

    def test_deletion_releases_then_removes_the_finalizer(self):
        seed_reservation({"finalizers": [FIN], "deletionTimestamp": "2026-01-01T00:00:00Z"})
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "gpus", "namespace": "default"}, "data": {"training": "2", "other": "1"}})
        self.assertEqual(reservation.reconcile(REQUEST), Outcome.done())
        self.assertEqual(
            summary(),
            [
                ("patch", "ConfigMap", "gpus", "merge", {"data": {"training": None}}),
                (
                    "patch",
                    "Reservation",
                    "training",
                    "json",
                    [{"op": "test", "path": "/metadata/finalizers/0", "value": FIN}, {"op": "remove", "path": "/metadata/finalizers/0"}],
                ),
            ],
        )
        self.assertEqual([e["event"] for e in SERVER.events()], [{"type": "normal", "reason": "Released", "message": "released 2 slots in ConfigMap gpus"}])
        self.assertEqual(SERVER.stored(Kinds.CONFIG_MAP, "default", "gpus")["data"], {"other": "1"})

    def test_deletion_with_the_pool_gone(self):
        seed_reservation({"finalizers": [FIN], "deletionTimestamp": "2026-01-01T00:00:00Z"})
        reservation.reconcile(REQUEST)
        self.assertEqual([(w[0], w[2]) for w in summary()], [("patch", "training")])
        self.assertEqual(len(SERVER.events()), 1)

    def test_a_failed_event_is_logged_not_retried(self):
        seed_reservation({"finalizers": [FIN]})
        SERVER.fail("record_event", "forbidden")
        self.assertEqual(reservation.reconcile(REQUEST), Outcome.done())
        warned = [c for c in SERVER.calls if c["fn"] == "log" and c["level"] == "warn"]
        self.assertEqual([c["message"] for c in warned], ["cannot record event on default/training: forbidden: injected by the test"])

    def test_a_missing_reservation_is_done(self):
        self.assertEqual(reservation.reconcile(REQUEST), Outcome.done())
        self.assertEqual(SERVER.writes(), [])

    def test_describe_and_map(self):
        d = reservation.describe()
        self.assertEqual(d.for_, RESERVATION)
        self.assertEqual(d.watches, [fake_wit.Watch(Kinds.CONFIG_MAP, fake_wit.Mapping_GuestMap())])
        self.assertEqual(d.field_indexes, [fake_wit.FieldIndex(RESERVATION, "spec.pool")])
        SERVER.seed(RESERVATION, {"metadata": {"name": "a", "namespace": "default"}, "spec": {"pool": "gpus"}})
        SERVER.seed(RESERVATION, {"metadata": {"name": "b", "namespace": "default"}, "spec": {"pool": "cpus"}})
        SERVER.seed(RESERVATION, {"metadata": {"name": "c", "namespace": "other"}, "spec": {"pool": "gpus"}})
        pool = '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpus", "namespace": "default"}}'
        self.assertEqual(reservation.map(Kinds.CONFIG_MAP, pool), [fake_wit.Request("default", "a")])


class TestConfigMapGenerator(unittest.TestCase):
    def setUp(self):
        SERVER.reset()

    def test_status_by_apply_and_the_event(self):
        SERVER.seed(GENERATOR, {"metadata": {"name": "greeting", "namespace": "default", "uid": "g-1"}, "spec": {"copies": 1, "data": {"a": "b"}}})
        self.assertEqual(generator.reconcile(fake_wit.Request("default", "greeting")), Outcome.done())
        cm, status = SERVER.writes()
        self.assertEqual(
            cm["patch"]["body"]["metadata"]["ownerReferences"],
            [{"apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator", "name": "greeting", "uid": "g-1", "controller": True, "blockOwnerDeletion": True}],
        )
        self.assertEqual(status["fn"], "patch_status")
        self.assertEqual(
            status["patch"],
            {
                "type": "apply",
                "body": {
                    "apiVersion": "example.reconciled.dev/v1alpha1",
                    "kind": "ConfigMapGenerator",
                    "metadata": {"name": "greeting", "namespace": "default"},
                    "status": {"generated": 1, "observedGeneration": 1},
                },
                "field_manager": "configmap-generator",
                "force": True,
            },
        )
        self.assertEqual([(e["name"], e["event"]) for e in SERVER.events()], [("greeting", {"type": "normal", "reason": "Generated", "message": "generated 1 ConfigMaps"})])

    def test_deletes_only_the_surplus_copies_it_controls(self):
        SERVER.seed(GENERATOR, {"metadata": {"name": "g", "namespace": "default", "uid": "g-1"}, "spec": {"copies": 1}, "status": {"generated": 1, "observedGeneration": 1}})
        label = {"example.reconciled.dev/generator": "g"}
        mine = {"apiVersion": "example.reconciled.dev/v1alpha1", "kind": "ConfigMapGenerator", "name": "g", "uid": "g-1", "controller": True}
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "g-1", "namespace": "default", "labels": label, "ownerReferences": [mine]}})
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "g-2", "namespace": "default", "labels": label, "ownerReferences": [{**mine, "uid": "other"}]}})
        generator.reconcile(fake_wit.Request("default", "g"))
        self.assertEqual([(w["fn"], w["name"]) for w in SERVER.writes()], [("patch", "g-0"), ("delete", "g-1")])


if __name__ == "__main__":
    unittest.main()
