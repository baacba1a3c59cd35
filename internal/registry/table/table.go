// Package table prints our resources as the server-side tables kubectl
// shows for `kubectl get`: one implementation of the Table protocol (single
// objects and lists, list metadata, --no-headers) shared by every resource,
// each of which only says its columns and how to fill a row.
package table

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Convertor prints objects of type T (a pointer to a resource's Go type)
// and lists of them. It implements rest.TableConvertor.
type Convertor[T runtime.Object] struct {
	// Kind names the resource in errors.
	Kind string
	// Columns are the table's column definitions.
	Columns []metav1.TableColumnDefinition
	// Cells returns one object's row, one cell per column.
	Cells func(T) []any
}

// ConvertToTable implements rest.TableConvertor.
func (c Convertor[T]) ConvertToTable(_ context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	out := &metav1.Table{ColumnDefinitions: c.Columns}
	add := func(obj runtime.Object) error {
		item, ok := obj.(T)
		if !ok {
			return fmt.Errorf("cannot print %T as a %s table", obj, c.Kind)
		}
		out.Rows = append(out.Rows, metav1.TableRow{Cells: c.Cells(item), Object: runtime.RawExtension{Object: obj}})
		return nil
	}
	switch {
	case meta.IsListType(object):
		if err := meta.EachListItem(object, add); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(object); err == nil {
			out.ResourceVersion, out.Continue, out.RemainingItemCount = l.GetResourceVersion(), l.GetContinue(), l.GetRemainingItemCount()
		}
	default:
		if err := add(object); err != nil {
			return nil, err
		}
		if m, err := meta.Accessor(object); err == nil {
			out.ResourceVersion = m.GetResourceVersion()
		}
	}
	if opts, ok := tableOptions.(*metav1.TableOptions); ok && opts != nil && opts.NoHeaders {
		out.ColumnDefinitions = nil
	}
	return out, nil
}

// Age formats a timestamp as kubectl's AGE column does.
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(metav1.Now().Sub(t.Time))
}
