package sagatest

import (
	"reflect"
	"time"
	"unsafe"
)

// equal reports whether a and b are deeply equal as reflect.DeepEqual
// says, except that time.Time values are equal if they are the same
// instant (time.Time.Equal): a time decoded from JSON (UTC, no monotonic
// reading) equals the same instant from the virtual clock (time.Local,
// with one) or from time.Date in any location.
func equal(a, b any) bool {
	if a == nil || b == nil {
		return a == b
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() {
		return false
	}
	// Addressable copies, so that times in unexported fields can be read.
	pa, pb := reflect.New(va.Type()).Elem(), reflect.New(vb.Type()).Elem()
	pa.Set(va)
	pb.Set(vb)
	return deepEqual(pa, pb, 0)
}

var timeType = reflect.TypeFor[time.Time]()

func deepEqual(a, b reflect.Value, depth int) bool {
	if !a.IsValid() || !b.IsValid() {
		return a.IsValid() == b.IsValid()
	}
	if a.Type() != b.Type() {
		return false
	}
	if depth > 100 { // a cycle, most likely: let reflect sort it out
		return reflect.DeepEqual(valueOf(a), valueOf(b))
	}
	if a.Type() == timeType {
		return timeOf(a).Equal(timeOf(b))
	}
	switch a.Kind() {
	case reflect.Array:
		for i := range a.Len() {
			if !deepEqual(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !deepEqual(a.Index(i), b.Index(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		if !a.CanInterface() { // in an unexported field: no copies
			return reflect.DeepEqual(valueOf(a), valueOf(b))
		}
		for _, k := range a.MapKeys() {
			va, _ := addressable(a.MapIndex(k))
			vb := b.MapIndex(k)
			if !vb.IsValid() {
				return false
			}
			vb, _ = addressable(vb)
			if !deepEqual(va, vb, depth+1) {
				return false
			}
		}
		return true
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return a.Pointer() == b.Pointer() || deepEqual(a.Elem(), b.Elem(), depth+1)
	case reflect.Interface:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		ea, oka := addressable(a.Elem())
		eb, okb := addressable(b.Elem())
		if !oka || !okb { // in an unexported field: no copies
			return reflect.DeepEqual(valueOf(a), valueOf(b))
		}
		return deepEqual(ea, eb, depth+1)
	case reflect.Struct:
		for i := range a.NumField() {
			if !deepEqual(a.Field(i), b.Field(i), depth+1) {
				return false
			}
		}
		return true
	case reflect.Func:
		return a.IsNil() && b.IsNil()
	case reflect.Bool:
		return a.Bool() == b.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return a.Int() == b.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return a.Uint() == b.Uint()
	case reflect.Float32, reflect.Float64:
		return a.Float() == b.Float()
	case reflect.Complex64, reflect.Complex128:
		return a.Complex() == b.Complex()
	case reflect.String:
		return a.String() == b.String()
	case reflect.Chan, reflect.UnsafePointer:
		return a.Pointer() == b.Pointer()
	}
	return reflect.DeepEqual(valueOf(a), valueOf(b))
}

// addressable returns v, or an addressable copy of it (a map element or
// the value in an interface is not addressable). ok is false if v was read
// through an unexported field, which a copy refuses.
func addressable(v reflect.Value) (reflect.Value, bool) {
	if v.CanAddr() {
		return v, true
	}
	if !v.CanInterface() {
		return v, false
	}
	p := reflect.New(v.Type()).Elem()
	p.Set(v)
	return p, true
}

// valueOf returns v as an interface value, also if it was read through an
// unexported field (v is addressable).
func valueOf(v reflect.Value) any {
	if v.CanInterface() {
		return v.Interface()
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Interface()
}

// timeOf returns the time.Time in v, which is addressable.
func timeOf(v reflect.Value) time.Time {
	if v.CanInterface() {
		return v.Interface().(time.Time)
	}
	return *(*time.Time)(unsafe.Pointer(v.UnsafeAddr()))
}
