package controlplane

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validatorAll is implemented by every message protoc-gen-validate generates.
type validatorAll interface{ ValidateAll() error }

// Validate checks m against its protoc-gen-validate rules and, because
// ValidateAll stops at anypb.Any fields, unpacks every Any inside m (typed
// filter configs, transport sockets, ...) and validates what it holds, to any
// depth. An Any whose type is not linked into the binary is an error: Envoy
// would reject it too, and it usually means a missing blank import.
func Validate(m proto.Message) error {
	if v, ok := m.(validatorAll); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	return validateAnys(m.ProtoReflect(), string(m.ProtoReflect().Descriptor().FullName()))
}

// validateAnys walks msg's populated fields and validates the contents of
// every Any it finds; path names the field in errors.
func validateAnys(msg protoreflect.Message, path string) error {
	if a, ok := msg.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("%s: unpack %s: %w", path, a.GetTypeUrl(), err)
		}
		if err := Validate(inner); err != nil {
			return fmt.Errorf("%s (%s): %w", path, a.GetTypeUrl(), err)
		}
		return nil
	}
	var errs []error
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				errs = append(errs, validateAnys(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface())))
				return true
			})
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			for i := 0; i < v.List().Len(); i++ {
				errs = append(errs, validateAnys(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", name, i)))
			}
		case fd.Message() != nil:
			errs = append(errs, validateAnys(v.Message(), name))
		}
		return true
	})
	return errors.Join(errs...)
}
