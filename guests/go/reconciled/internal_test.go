package reconciled

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"reconciled.dev/guest/internal/host"
)

func TestADescriptionCarriesEverythingDeclaredAndEachStepIsACopy(t *testing.T) {
	cms := Gvk{Version: "v1", Kind: "ConfigMap"}
	gen := Gvk{Group: "example.reconciled.dev", Version: "v1alpha1", Kind: "ConfigMapGenerator"}
	base := Describe(gen).Owns(cms)
	d := base.WatchesLabel(cms, "app").WatchesGuestMap(cms).WatchesOwner(cms).
		Namespaces("a", "b").LabelSelector("x=y").FieldIndex(cms, "data.k").Eventual()
	want := host.Description{
		For:  host.Gvk(gen),
		Owns: []host.Gvk{host.Gvk(cms)},
		Watches: []host.Watch{
			{Kind: host.Gvk(cms), Mapping: 1, Label: "app"},
			{Kind: host.Gvk(cms), Mapping: 2},
			{Kind: host.Gvk(cms), Mapping: 0},
		},
		Namespaces:    []string{"a", "b"},
		LabelSelector: "x=y",
		FieldIndexes:  []host.FieldIndex{{Kind: host.Gvk(cms), Path: "data.k"}},
		Eventual:      true,
	}
	if got := d.host(); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if len(base.host().Watches) != 0 || base.host().Eventual {
		t.Fatalf("the base description changed: %+v", base.host())
	}
}

func TestAnErrorReachesTheHostWithItsCaseAndAPlainErrorAsOther(t *testing.T) {
	cases := []struct {
		err  error
		want host.Failure
	}{
		{Errorf(Conflict, "lost %d", 1), host.Failure{Tag: uint8(Conflict), Message: "lost 1"}},
		{fmt.Errorf("applying: %w", Errorf(Forbidden, "no")), host.Failure{Tag: uint8(Forbidden), Message: "applying: forbidden: no"}},
		{errors.New("boom"), host.Failure{Tag: uint8(Other), Message: "boom"}},
	}
	for _, c := range cases {
		if got := failure(c.err); *got != c.want {
			t.Errorf("%v: got %+v, want %+v", c.err, *got, c.want)
		}
	}
}

func TestExportTurnsOutcomesIntoMilliseconds(t *testing.T) {
	Export(exported{RequeueAfter(1500 * time.Microsecond)})
	o, f := host.Exported.Reconcile("ns", "n")
	if f != nil || !o.Requeue || o.RequeueAfterMs != 1 {
		t.Fatalf("got %+v %+v", o, f)
	}
	if host.Exported.Map != nil {
		t.Fatal("a reconciler without Map exports no map")
	}
}

type exported struct{ o Outcome }

func (e exported) Describe() Description              { return Describe(Gvk{Version: "v1", Kind: "ConfigMap"}) }
func (e exported) Reconcile(Request) (Outcome, error) { return e.o, nil }
