package rlqs_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestExampleEnvoyConfigIsValid reads examples/rlqs/envoy.yaml as Envoy
// would: every field and every typed_config's type must exist in Envoy's
// protos (go-control-plane), and each message, the typed configs' inside
// included, must pass the protos' validation rules. No Envoy binary runs
// here; this is the part of Envoy's config loading that needs none.
func TestExampleEnvoyConfigIsValid(t *testing.T) {
	raw, err := os.ReadFile("../../examples/rlqs/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := yaml.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("examples/rlqs/envoy.yaml is not an Envoy bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("examples/rlqs/envoy.yaml: %v", err)
	}
	n := validateAnys(t, b.ProtoReflect())
	if n < 5 {
		t.Errorf("validated %d typed configs, want at least 5 (the filters, the matcher's inputs and action, the upstream options)", n)
	}
}

// validateAnys unpacks every Any below m, validates what it holds, and
// returns how many it found.
func validateAnys(t *testing.T, m protoreflect.Message) int {
	t.Helper()
	n := 0
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					n += validateMessage(t, mv.Message())
				}
				return true
			})
		case fd.IsList() && fd.Message() != nil:
			for i := 0; i < v.List().Len(); i++ {
				n += validateMessage(t, v.List().Get(i).Message())
			}
		case fd.Message() != nil:
			n += validateMessage(t, v.Message())
		}
		return true
	})
	return n
}

func validateMessage(t *testing.T, m protoreflect.Message) int {
	t.Helper()
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		return validateAnys(t, m)
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		t.Errorf("typed_config %s: %v", a.GetTypeUrl(), err)
		return 0
	}
	if v, ok := inner.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("typed_config %s: %v", a.GetTypeUrl(), err)
		}
	}
	return 1 + validateAnys(t, proto.Message(inner).ProtoReflect())
}
