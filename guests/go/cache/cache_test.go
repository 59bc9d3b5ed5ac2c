package cache_test

import (
	"fmt"
	"testing"

	"reconciled.dev/guest/api"
	"reconciled.dev/guest/cache"
	"reconciled.dev/guest/fake"
	"reconciled.dev/guest/reconciled"
)

type ConfigMap struct {
	reconciled.TypeMeta
	Metadata reconciled.ObjectMeta `json:"metadata"`
	Data     map[string]string     `json:"data,omitempty"`
}

var configMaps = reconciled.NewKind[ConfigMap]("", "v1", "ConfigMap")

func setup(t *testing.T) *fake.Host {
	h := fake.New()
	fake.Install(t, h)
	for i := range 5 {
		ns := "a"
		if i == 4 {
			ns = "b"
		}
		cm := &ConfigMap{Metadata: reconciled.ObjectMeta{Name: fmt.Sprint("cm-", i), Namespace: ns,
			Labels: map[string]string{"app.kubernetes.io/part": fmt.Sprint(i % 2)}}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if err := h.Add(cm); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func TestGetAndGetOptReadOneObjectTyped(t *testing.T) {
	setup(t)
	cm, err := cache.Get(configMaps, "a", "cm-1")
	if err != nil || cm.Data["i"] != "1" || cm.Kind != "ConfigMap" {
		t.Fatal(cm, err)
	}
	if _, err := cache.Get(configMaps, "a", "missing"); !reconciled.IsNotFound(err) {
		t.Fatal(err)
	}
	if cm, err := cache.GetOpt(configMaps, "a", "missing"); cm != nil || err != nil {
		t.Fatal(cm, err)
	}
	if cm, err := api.GetOpt(configMaps, "b", "cm-4"); cm == nil || err != nil {
		t.Fatal(cm, err)
	}
}

func TestListReadsEveryPageAndListPageOne(t *testing.T) {
	setup(t)
	all, err := cache.List(configMaps, cache.ListOptions{}.Limit(2))
	if err != nil || len(all) != 5 {
		t.Fatal(len(all), err)
	}
	in, err := cache.List(configMaps, cache.ListOptions{}.InNamespace("a").Labels("app.kubernetes.io/part=1"))
	if err != nil || len(in) != 2 || in[0].Metadata.Name != "cm-1" || in[1].Metadata.Name != "cm-3" {
		t.Fatal(in, err)
	}
	page, err := cache.ListPage(configMaps, cache.ListOptions{}.InNamespace("a").Limit(3))
	if err != nil || len(page.Items) != 3 || page.Continue == "" {
		t.Fatal(page, err)
	}
	next, err := api.ListPage(configMaps, cache.ListOptions{}.InNamespace("a").Limit(3).ContinueFrom(page.Continue))
	if err != nil || len(next.Items) != 1 || next.Continue != "" {
		t.Fatal(next, err)
	}
	byField, err := cache.List(configMaps, cache.ListOptions{}.Field("data.i", "4"))
	if err != nil || len(byField) != 1 || byField[0].Metadata.Namespace != "b" {
		t.Fatal(byField, err)
	}
}

func TestAReadFailureKeepsItsCase(t *testing.T) {
	h := setup(t)
	h.Fail("list", configMaps, "", reconciled.Errorf(reconciled.UnindexedField, "data.x"))
	if _, err := cache.List(configMaps, cache.ListOptions{}.Field("data.x", "1")); !reconciled.IsUnindexedField(err) {
		t.Fatal(err)
	}
}
