package table

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConvertor(t *testing.T) {
	t.Parallel()
	c := Convertor[*corev1.Namespace]{Kind: "Namespace", Columns: []metav1.TableColumnDefinition{{Name: "Name", Type: "string"}},
		Cells: func(ns *corev1.Namespace) []any { return []any{ns.Name} }}
	one := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "7"}}
	out, err := c.ConvertToTable(context.Background(), one, nil)
	if err != nil || len(out.Rows) != 1 || out.Rows[0].Cells[0] != "a" || out.ResourceVersion != "7" || len(out.ColumnDefinitions) != 1 {
		t.Fatalf("one object: %+v %v", out, err)
	}
	list := &corev1.NamespaceList{ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "next"},
		Items: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	out, err = c.ConvertToTable(context.Background(), list, &metav1.TableOptions{NoHeaders: true})
	if err != nil || len(out.Rows) != 2 || out.Rows[1].Cells[0] != "b" || out.ResourceVersion != "9" || out.Continue != "next" || out.ColumnDefinitions != nil {
		t.Fatalf("list: %+v %v", out, err)
	}
	if _, err := c.ConvertToTable(context.Background(), &corev1.Service{}, nil); err == nil || !strings.Contains(err.Error(), "as a Namespace table") {
		t.Fatalf("wrong type: %v", err)
	}
	if Age(metav1.Time{}) != "<unknown>" || Age(metav1.Now()) != "0s" {
		t.Fatalf("Age: %q %q", Age(metav1.Time{}), Age(metav1.Now()))
	}
}
