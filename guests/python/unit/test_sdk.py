"""Unit tests of reconciled_guest against the fake host (fake_wit): no wasm, no cluster."""

import calendar
import copy
import time
import unittest
import warnings
from unittest import mock

import fake_wit  # installs the fake bindings; before reconciled_guest

import reconciled_guest as rg
from reconciled_guest import (
    Kinds,
    ListOptions,
    Outcome,
    ReconcileError,
    cache,
    client,
    controller_of,
    controller_reference,
    events,
    find_condition,
    gvk,
    has_finalizer,
    is_condition_true,
    is_controlled_by,
    remove_condition,
    set_condition,
    set_controller_reference,
    with_finalizer,
)

SERVER = fake_wit.SERVER
THING = gvk("example.dev/v1", "Thing")
FIN = "example.dev/cleanup"


def at(iso: str):
    """Sets the guest's clock (``time.time``) to ``iso`` plus a fraction of a second."""
    t = calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))
    return mock.patch("time.time", return_value=t + 0.891)


def owner(uid="u-1", name="owner"):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}


class Case(unittest.TestCase):
    def setUp(self):
        SERVER.reset()

    def assertCase(self, case, f, *args, **kwargs):
        with self.assertRaises(ReconcileError) as cm:
            f(*args, **kwargs)
        self.assertEqual(cm.exception.case, case, str(cm.exception))
        return cm.exception


class TestReading(Case):
    def test_list_options_reach_the_host(self):
        o = ListOptions().in_namespace("ns").labels("a=b").field("spec.x", "1").field("spec.y", "2").limit(7).continue_from("t")
        self.assertEqual(o._raw(), fake_wit.ListOptions("ns", "a=b", [("spec.x", "1"), ("spec.y", "2")], 7, "t"))
        self.assertEqual(ListOptions()._raw(), fake_wit.ListOptions("", "", [], 0, ""))

    def test_the_old_constructor_keywords_still_work(self):
        o = ListOptions(namespace="ns", labels="a=b", limit=3)
        self.assertEqual(o._raw(), fake_wit.ListOptions("ns", "a=b", [], 3, ""))
        self.assertEqual(o, ListOptions().in_namespace("ns").labels("a=b").limit(3))

    def test_with_labels_and_with_field_are_deprecated_aliases(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            o = ListOptions().with_labels("a=b").with_field("spec.x", "1")
        self.assertEqual(o._raw(), fake_wit.ListOptions("", "a=b", [("spec.x", "1")], 0, ""))
        self.assertEqual([w.category for w in caught], [DeprecationWarning, DeprecationWarning])

    def test_list_follows_continue_tokens(self):
        for n in "abcde":
            SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": n, "namespace": "ns", "labels": {"app": "other" if n == "c" else "web"}}})
        names = [o["metadata"]["name"] for o in cache.list(Kinds.CONFIG_MAP, ListOptions().in_namespace("ns").labels("app=web").limit(2))]
        self.assertEqual(names, ["a", "b", "d", "e"])
        self.assertEqual(len([c for c in SERVER.calls if c["fn"] == "cache.list"]), 2)
        items, token = cache.list_page(Kinds.CONFIG_MAP, ListOptions().limit(2))
        self.assertEqual([o["metadata"]["name"] for o in items], ["a", "b"])
        items, _ = cache.list_page(Kinds.CONFIG_MAP, ListOptions().limit(2).continue_from(token))
        self.assertEqual([o["metadata"]["name"] for o in items], ["c", "d"])

    def test_get_opt(self):
        self.assertIsNone(cache.get_opt(Kinds.CONFIG_MAP, "ns", "missing"))
        SERVER.fail("cache.get", "timeout")
        self.assertCase("timeout", cache.get_opt, Kinds.CONFIG_MAP, "ns", "missing")

    def test_settings(self):
        SERVER.settings = '{"replicas": 3}'
        self.assertEqual(rg.settings(), {"replicas": 3})

    def test_spans_end_with_their_block_and_a_raise_marks_them_failed(self):
        with rg.open_span("render") as span:
            span.attribute("template", "a").attribute("replicas", 3)
        def write(span):
            raise rg.ReconcileError("conflict", "changed meanwhile")

        with self.assertRaises(rg.ReconcileError):
            rg.in_span("write", write)
        late = rg.open_span("once")
        late.end()
        late.attribute("late", "x")
        late.fail("too late")
        self.assertEqual(
            [(s["name"], s["attributes"], s["open"], s["error"]) for s in SERVER.spans],
            [
                ("render", {"template": "a", "replicas": "3"}, False, None),
                ("write", {}, False, str(rg.ReconcileError("conflict", "changed meanwhile"))),
                ("once", {}, False, None),
            ],
        )

    def test_describe_watches_owner(self):
        d = (
            rg.describe(THING)
            .owns(Kinds.CONFIG_MAP)
            .watches_owner(Kinds.SECRET)
            .watches_label(Kinds.POD, "thing")
            .watches_guest_map(Kinds.SERVICE)
            .field_index(Kinds.POD, "spec.nodeName")
            .eventual()
            .build()
        )
        self.assertEqual(
            d.watches,
            [
                fake_wit.Watch(Kinds.SECRET, fake_wit.Mapping_Owner()),
                fake_wit.Watch(Kinds.POD, fake_wit.Mapping_Label("thing")),
                fake_wit.Watch(Kinds.SERVICE, fake_wit.Mapping_GuestMap()),
            ],
        )
        self.assertEqual(d.consistency, fake_wit.Consistency.EVENTUAL)


class TestWriting(Case):
    def test_apply_status_sends_only_the_identity_and_the_status(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "labels": {"a": "b"}, "finalizers": ["f"]}, "spec": {"size": 1}})
        answer = client.apply_status(THING, {**read, "status": {"ready": True}}, "mgr", force=True)
        self.assertEqual(
            SERVER.writes(),
            [
                {
                    "fn": "patch_status",
                    "kind": "example.dev/v1/Thing",
                    "namespace": "ns",
                    "name": "t",
                    "patch": {
                        "type": "apply",
                        "body": {"apiVersion": "example.dev/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "ns"}, "status": {"ready": True}},
                        "field_manager": "mgr",
                        "force": True,
                    },
                }
            ],
        )
        self.assertEqual(answer["status"], {"ready": True})
        self.assertEqual(SERVER.stored(THING, "ns", "t")["spec"], {"size": 1})

    def test_apply_status_of_a_cluster_scoped_object(self):
        SERVER.seed(THING, {"metadata": {"name": "c"}})
        client.apply_status(THING, {"metadata": {"name": "c"}, "status": {"n": 1}}, "mgr")
        (w,) = SERVER.writes()
        self.assertEqual(w["patch"]["body"]["metadata"], {"name": "c"})
        self.assertEqual(w["namespace"], "")
        self.assertFalse(w["patch"]["force"])

    def test_apply_status_of_a_missing_object_is_not_found(self):
        self.assertCase("not-found", client.apply_status, THING, {"metadata": {"name": "x", "namespace": "ns"}, "status": {}}, "m", True)

    def test_merge_patch_status(self):
        SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns"}, "status": {"a": 1, "b": 2}})
        answer = client.merge_patch_status(THING, "ns", "t", {"status": {"b": None, "c": 3}})
        self.assertEqual([(w["fn"], w["patch"]) for w in SERVER.writes()], [("patch_status", {"type": "merge", "body": {"status": {"b": None, "c": 3}}})])
        self.assertEqual(answer["status"], {"a": 1, "c": 3})

    def test_create_or_update_creates(self):
        seen = []

        def mutate(cm):
            seen.append(copy.deepcopy(cm))
            cm["data"] = {"k": "v"}

        changed, obj = client.create_or_update(Kinds.CONFIG_MAP, "ns", "cm", mutate)
        self.assertEqual(seen, [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}}])
        self.assertEqual(changed, "created")
        self.assertEqual(
            [(w["fn"], w["body"]) for w in SERVER.writes()],
            [("create", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "v"}})],
        )
        self.assertTrue(obj["metadata"]["uid"])

    def test_create_or_update_updates_guarded_by_the_resource_version(self):
        read = SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "old"}})
        written = client.create_or_update(Kinds.CONFIG_MAP, "ns", "cm", lambda cm: cm.update(data={"k": "new"}))
        self.assertEqual(written.changed, rg.UPDATED)
        (w,) = SERVER.writes()
        self.assertEqual(w["fn"], "update")
        self.assertEqual(w["body"]["metadata"]["resourceVersion"], read["metadata"]["resourceVersion"])
        self.assertEqual(written.object["data"], {"k": "new"})

    def test_create_or_update_writes_nothing_when_nothing_changes(self):
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "cm", "namespace": "ns", "labels": {"a": "b"}}, "data": {"k": "v"}})

        def same(cm):
            cm["data"] = {"k": "v"}
            cm["metadata"]["labels"] = {"a": "b"}

        self.assertEqual(client.create_or_update(Kinds.CONFIG_MAP, "ns", "cm", same).changed, "unchanged")
        self.assertEqual(SERVER.writes(), [])

    def test_create_or_update_takes_a_returned_replacement(self):
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "v"}})
        changed, _ = client.create_or_update(Kinds.CONFIG_MAP, "ns", "cm", lambda cm: {**cm, "data": {"k": "w"}})
        self.assertEqual(changed, "updated")
        self.assertEqual(SERVER.writes()[0]["body"]["data"], {"k": "w"})

    def test_create_or_update_tells_true_from_1(self):
        SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"on": 1}})
        self.assertEqual(client.create_or_update(THING, "ns", "t", lambda o: o["spec"].update(on=True)).changed, "updated")

    def test_create_or_update_refuses_a_rename(self):
        e = self.assertCase("invalid", client.create_or_update, Kinds.CONFIG_MAP, "ns", "cm", lambda cm: cm["metadata"].update(name="other"))
        self.assertIn("renamed it to ns/other", str(e))
        self.assertEqual(SERVER.writes(), [])

    def test_create_or_update_conflict(self):
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "cm", "namespace": "ns"}, "data": {"k": "v"}})
        SERVER.fail("update", "conflict")
        self.assertCase("conflict", client.create_or_update, Kinds.CONFIG_MAP, "ns", "cm", lambda cm: cm.update(data={"k": "x"}))

    @staticmethod
    def desired():
        return {"metadata": {"name": "cm", "namespace": "ns", "labels": {"a": "b"}}, "data": {"k": "v"}}

    def test_apply_if_changed_creates(self):
        changed, _ = client.apply_if_changed(Kinds.CONFIG_MAP, self.desired(), "mgr")
        self.assertEqual(changed, "created")
        self.assertEqual(
            [(w["fn"], w["patch"]) for w in SERVER.writes()],
            [("patch", {"type": "apply", "body": {"apiVersion": "v1", "kind": "ConfigMap", **self.desired()}, "field_manager": "mgr", "force": True})],
        )

    def test_apply_if_changed_writes_nothing_when_the_cache_holds_it(self):
        SERVER.seed(
            Kinds.CONFIG_MAP,
            {"metadata": {"name": "cm", "namespace": "ns", "labels": {"a": "b", "other": "x"}, "annotations": {"z": "1"}}, "data": {"k": "v"}},
        )
        changed, obj = client.apply_if_changed(Kinds.CONFIG_MAP, self.desired(), "mgr")
        self.assertEqual(changed, "unchanged")
        self.assertEqual(SERVER.writes(), [])
        self.assertEqual(obj["metadata"]["annotations"], {"z": "1"})

    def test_apply_if_changed_updates(self):
        SERVER.seed(Kinds.CONFIG_MAP, {"metadata": {"name": "cm", "namespace": "ns", "labels": {"a": "c"}}, "data": {"k": "v"}})
        self.assertEqual(client.apply_if_changed(Kinds.CONFIG_MAP, self.desired(), "mgr").changed, "updated")
        self.assertEqual(len(SERVER.writes()), 1)
        self.assertEqual(SERVER.stored(Kinds.CONFIG_MAP, "ns", "cm")["metadata"]["labels"], {"a": "b"})

    def test_apply_if_changed_lists_and_none(self):
        def with_list(items):
            return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"items": items}}

        SERVER.seed(Kinds.POD, with_list([{"name": "a", "image": "x", "pullPolicy": "Always"}]))
        self.assertEqual(client.apply_if_changed(Kinds.POD, with_list([{"name": "a", "image": "x"}]), "m").changed, "unchanged")
        self.assertEqual(client.apply_if_changed(Kinds.POD, with_list([{"name": "a", "image": "x"}, {"name": "b"}]), "m").changed, "updated")
        SERVER.reset()
        SERVER.seed(Kinds.POD, with_list([{"name": "a"}, {"name": "b"}]))
        self.assertEqual(client.apply_if_changed(Kinds.POD, with_list([{"name": "a"}]), "m").changed, "updated")
        SERVER.reset()
        SERVER.seed(Kinds.POD, {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"gone": 1}})
        self.assertEqual(client.apply_if_changed(Kinds.POD, {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"gone": None}}, "m").changed, "updated")
        self.assertEqual(client.apply_if_changed(Kinds.POD, {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"never": None}}, "m").changed, "unchanged")

    def test_apply_if_changed_tells_values_apart(self):
        SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"n": 1}})
        meta = {"name": "t", "namespace": "ns"}
        self.assertEqual(client.apply_if_changed(THING, {"metadata": meta, "spec": {"n": "1"}}, "m").changed, "updated")
        SERVER.seed(THING, {"metadata": meta, "spec": {"n": 1}})
        self.assertEqual(client.apply_if_changed(THING, {"metadata": meta, "spec": {"n": True}}, "m").changed, "updated")
        self.assertEqual(client.apply_if_changed(THING, {"metadata": meta, "spec": {"off": False}}, "m").changed, "updated")

    def test_events_name_the_object(self):
        events.normal(THING, {"metadata": {"name": "t", "namespace": "ns"}}, "Done", "all good")
        events.warning(THING, {"metadata": {"name": "c"}}, "Broken", "not good")
        self.assertEqual(
            SERVER.events(),
            [
                {"fn": "record_event", "kind": "example.dev/v1/Thing", "namespace": "ns", "name": "t", "event": {"type": "normal", "reason": "Done", "message": "all good"}},
                {"fn": "record_event", "kind": "example.dev/v1/Thing", "namespace": "", "name": "c", "event": {"type": "warning", "reason": "Broken", "message": "not good"}},
            ],
        )
        self.assertCase("invalid", events.normal, THING, {"metadata": {"name": "t"}}, "not camel", "x")


class TestOwners(Case):
    def test_controller_reference(self):
        self.assertEqual(
            controller_reference(THING, owner()),
            {"apiVersion": "example.dev/v1", "kind": "Thing", "name": "owner", "uid": "u-1", "controller": True, "blockOwnerDeletion": True},
        )
        self.assertCase("invalid", controller_reference, THING, {"metadata": {"name": "new"}})

    def test_set_controller_reference_appends_keeps_and_replaces_by_uid(self):
        other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u-9"}
        obj = {"metadata": {"name": "o", "ownerReferences": [other, {"apiVersion": "old/v0", "kind": "Thing", "name": "renamed", "uid": "u-1"}]}}
        set_controller_reference(THING, owner(), obj)
        self.assertEqual(obj["metadata"]["ownerReferences"], [other, controller_reference(THING, owner())])
        set_controller_reference(THING, owner(), obj)
        self.assertEqual(len(obj["metadata"]["ownerReferences"]), 2)
        bare = {"metadata": {"name": "b"}}
        set_controller_reference(THING, owner(), bare)
        self.assertEqual(bare["metadata"]["ownerReferences"], [controller_reference(THING, owner())])

    def test_set_controller_reference_refuses_a_second_controller(self):
        obj = {"kind": "ConfigMap", "metadata": {"name": "o", "namespace": "ns", "ownerReferences": [controller_reference(THING, owner("u-1", "first"))]}}
        before = copy.deepcopy(obj)
        e = self.assertCase("invalid", set_controller_reference, THING, owner("u-2", "second"), obj)
        for part in ("ConfigMap ns/o", "first", "second"):
            self.assertIn(part, str(e))
        self.assertEqual(obj, before)

    def test_controller_of_and_is_controlled_by(self):
        obj = {"metadata": {"name": "o", "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u-1"}, controller_reference(THING, owner("u-2"))]}}
        self.assertEqual(controller_of(obj)["uid"], "u-2")
        self.assertTrue(is_controlled_by(obj, owner("u-2")))
        self.assertFalse(is_controlled_by(obj, owner("u-1")))
        self.assertFalse(is_controlled_by(obj, {"metadata": {"name": "no-uid"}}))
        self.assertIsNone(controller_of({"metadata": {}}))


class TestFinalizers(Case):
    def handlers(self, log, seen=None):
        seen = [] if seen is None else seen

        def apply(o):
            log.append("apply")
            seen.append(o)
            return Outcome.requeue_after(5)

        def cleanup(o):
            log.append("cleanup")
            seen.append(o)
            return Outcome.requeue_after(7)

        return apply, cleanup

    def test_adds_a_missing_finalizer_then_applies_with_the_patched_object(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns"}})
        log, seen = [], []
        out = with_finalizer(THING, read, FIN, *self.handlers(log, seen))
        self.assertEqual(out, Outcome.requeue_after(5))
        self.assertEqual(log, ["apply"])
        self.assertEqual(
            [(w["fn"], w["name"], w["patch"]) for w in SERVER.writes()],
            [("patch", "t", {"type": "json", "body": [{"op": "test", "path": "/metadata/finalizers", "value": None}, {"op": "add", "path": "/metadata/finalizers", "value": [FIN]}]})],
        )
        self.assertEqual(seen[0]["metadata"]["finalizers"], [FIN])
        self.assertNotEqual(seen[0]["metadata"]["resourceVersion"], read["metadata"]["resourceVersion"])

    def test_appends_to_an_existing_list_testing_it_whole(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["a", "b"]}})
        with_finalizer(THING, read, FIN, *self.handlers([]))
        self.assertEqual(
            SERVER.writes()[0]["patch"]["body"],
            [{"op": "test", "path": "/metadata/finalizers", "value": ["a", "b"]}, {"op": "add", "path": "/metadata/finalizers/-", "value": FIN}],
        )
        self.assertEqual(SERVER.stored(THING, "ns", "t")["metadata"]["finalizers"], ["a", "b", FIN])

    def test_only_applies_when_the_finalizer_is_there(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": [FIN]}})
        log = []
        with_finalizer(THING, read, FIN, *self.handlers(log))
        self.assertEqual(log, ["apply"])
        self.assertEqual(SERVER.writes(), [])

    def test_on_deletion_cleans_up_then_removes_the_entry_at_its_index(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["a", FIN, "b"], "deletionTimestamp": "2026-01-01T00:00:00Z"}})
        log = []

        def cleanup(o):
            self.assertEqual(SERVER.writes(), [])  # nothing is written before cleanup returns
            log.append("cleanup")
            return Outcome.done()

        out = with_finalizer(THING, read, FIN, self.handlers(log)[0], cleanup)
        self.assertEqual(out, Outcome.done())
        self.assertEqual(log, ["cleanup"])
        self.assertEqual(
            [w["patch"]["body"] for w in SERVER.writes()],
            [[{"op": "test", "path": "/metadata/finalizers/1", "value": FIN}, {"op": "remove", "path": "/metadata/finalizers/1"}]],
        )
        self.assertEqual(SERVER.stored(THING, "ns", "t")["metadata"]["finalizers"], ["a", "b"])

    def test_a_finalizer_gone_with_its_object_from_a_cache_that_had_not_seen_it_go_is_not_an_error(self):
        # Read from the cache, but no longer on the server: the finalizer removal finds nothing.
        read = {"metadata": {"name": "gone", "namespace": "ns", "finalizers": [FIN], "deletionTimestamp": "x"}}
        out = with_finalizer(THING, read, FIN, self.handlers([])[0], lambda o: Outcome.done())
        self.assertEqual(out, Outcome.done())

    def test_a_failing_cleanup_keeps_the_finalizer(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": [FIN], "deletionTimestamp": "x"}})

        def cleanup(o):
            raise RuntimeError("pool unreachable")

        with self.assertRaisesRegex(RuntimeError, "pool unreachable"):
            with_finalizer(THING, read, FIN, lambda o: Outcome.done(), cleanup)
        self.assertEqual(SERVER.writes(), [])

    def test_on_deletion_without_the_finalizer_nothing_runs(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["other"], "deletionTimestamp": "x"}})
        log = []
        self.assertEqual(with_finalizer(THING, read, FIN, *self.handlers(log)), Outcome.done())
        self.assertEqual(log, [])
        self.assertEqual(SERVER.writes(), [])

    def test_a_list_changed_since_read_is_a_conflict_and_apply_does_not_run(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["a"]}})
        SERVER.seed(THING, {"metadata": {**read["metadata"], "finalizers": ["a", "z"]}})
        log = []
        e = self.assertCase("conflict", with_finalizer, THING, read, FIN, *self.handlers(log))
        self.assertIn("finalizers of Thing ns/t changed since they were read", str(e))
        self.assertEqual(log, [])
        self.assertEqual(SERVER.stored(THING, "ns", "t")["metadata"]["finalizers"], ["a", "z"])

    def test_a_moved_index_is_a_conflict_and_removes_nothing(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["a", FIN], "deletionTimestamp": "x"}})
        SERVER.seed(THING, {"metadata": {**read["metadata"], "finalizers": [FIN, "a"]}})
        self.assertCase("conflict", with_finalizer, THING, read, FIN, *self.handlers([]))
        self.assertEqual(SERVER.stored(THING, "ns", "t")["metadata"]["finalizers"], [FIN, "a"])

    def test_invalid_is_conflict_other_cases_pass_through(self):
        read = SERVER.seed(THING, {"metadata": {"name": "t", "namespace": "ns"}})
        for injected, seen in (("invalid", "conflict"), ("forbidden", "forbidden"), ("not-found", "not-found")):
            SERVER.fail("patch", injected)
            self.assertCase(seen, with_finalizer, THING, read, FIN, *self.handlers([]))

    def test_has_finalizer(self):
        self.assertTrue(has_finalizer({"metadata": {"finalizers": ["a", FIN]}}, FIN))
        self.assertFalse(has_finalizer({"metadata": {"finalizers": ["a"]}}, FIN))
        self.assertFalse(has_finalizer({"metadata": {}}, FIN))


def ready(status, reason="R", message="m", observed_generation=None):
    c = {"type": "Ready", "status": status, "reason": reason, "message": message}
    if observed_generation is not None:
        c["observedGeneration"] = observed_generation
    return c


class TestConditions(Case):
    def test_a_new_type_is_appended_at_now_to_the_second(self):
        conds = []
        with at("2026-03-04T05:06:07Z"):
            self.assertTrue(set_condition(conds, ready("True", observed_generation=2)))
        self.assertEqual(conds, [{**ready("True", observed_generation=2), "lastTransitionTime": "2026-03-04T05:06:07Z"}])

    def test_the_given_condition_is_copied_not_kept(self):
        given = ready("True")
        conds = []
        set_condition(conds, given)
        self.assertNotIn("lastTransitionTime", given)

    def test_a_given_time_is_kept(self):
        conds = []
        set_condition(conds, {**ready("False"), "lastTransitionTime": "2020-01-01T00:00:00Z"})
        self.assertEqual(conds[0]["lastTransitionTime"], "2020-01-01T00:00:00Z")

    def test_the_time_moves_only_when_the_status_changes(self):
        conds = [{"type": "Other", "status": "True", "reason": "X", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]
        with at("2026-01-01T00:00:00Z"):
            set_condition(conds, ready("False", "A", "a", 1))
        with at("2026-01-01T00:10:00Z"):
            self.assertTrue(set_condition(conds, ready("False", "B", "b", 2)))
            self.assertEqual(find_condition(conds, "Ready"), {**ready("False", "B", "b", 2), "lastTransitionTime": "2026-01-01T00:00:00Z"})
            self.assertFalse(set_condition(conds, ready("False", "B", "b", 2)))
        with at("2026-01-01T00:20:00Z"):
            self.assertTrue(set_condition(conds, ready("True", "B", "b", 2)))
        self.assertEqual(find_condition(conds, "Ready")["lastTransitionTime"], "2026-01-01T00:20:00Z")
        set_condition(conds, {**ready("Unknown", "B", "b", 2), "lastTransitionTime": "2027-01-01T00:00:00Z"})
        self.assertEqual(find_condition(conds, "Ready")["lastTransitionTime"], "2027-01-01T00:00:00Z")
        self.assertEqual([c["type"] for c in conds], ["Other", "Ready"])

    def test_dropping_observed_generation_is_a_change(self):
        conds = []
        set_condition(conds, ready("True", observed_generation=3))
        self.assertTrue(set_condition(conds, ready("True")))
        self.assertNotIn("observedGeneration", conds[0])

    def test_find_is_true_remove(self):
        conds = [ready("True"), {**ready("False"), "type": "Degraded"}]
        self.assertTrue(is_condition_true(conds, "Ready"))
        self.assertFalse(is_condition_true(conds, "Degraded"))
        self.assertFalse(is_condition_true(conds, "Missing"))
        self.assertFalse(is_condition_true(None, "Ready"))
        self.assertIsNone(find_condition(conds, "Missing"))
        self.assertTrue(remove_condition(conds, "Ready"))
        self.assertFalse(remove_condition(conds, "Ready"))
        self.assertEqual([c["type"] for c in conds], ["Degraded"])


class TestExport(Case):
    def test_errors_reach_the_host_as_their_case(self):
        class R(rg.Reconciler):
            def describe(self):
                return rg.describe(THING).build()

            def reconcile(self, request):
                if request.name == "conflict":
                    raise ReconcileError("conflict", "raised")
                raise ValueError("plain")

        world = rg.export(R())()
        with self.assertRaises(fake_wit.Err) as cm:
            world.reconcile(fake_wit.Request("ns", "conflict"))
        self.assertEqual(cm.exception.value, fake_wit.ERROR_CLASSES["conflict"]("raised"))
        with self.assertRaises(fake_wit.Err) as cm:
            world.reconcile(fake_wit.Request("ns", "plain"))
        self.assertEqual(cm.exception.value, fake_wit.ERROR_CLASSES["other"]("ValueError: plain"))


if __name__ == "__main__":
    unittest.main()
