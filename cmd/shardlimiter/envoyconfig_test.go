package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
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

// TestEnvoyConfigsAreValid reads the Envoy bootstraps the repository
// ships, examples/rlqs/envoy.yaml and the one in docs/ENVOY.md, as Envoy
// would up to the point where it needs a binary: every field and every
// typed_config's type must exist in Envoy's protos (go-control-plane),
// and each message, the typed configs' insides included, must pass the
// protos' validation rules.
func TestEnvoyConfigsAreValid(t *testing.T) {
	rlqs, err := os.ReadFile("../../examples/rlqs/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/ENVOY.md")
	if err != nil {
		t.Fatal(err)
	}
	rls := yamlBlock(t, string(doc), "static_resources:")
	for _, c := range []struct {
		name string
		src  []byte
		// typed configs at least: the filters, the upstream options and,
		// for RLQS, the matcher's inputs and action
		least int
	}{
		{"examples/rlqs/envoy.yaml", rlqs, 7},
		{"docs/ENVOY.md", []byte(rls), 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tree any
			if err := yaml.Unmarshal(c.src, &tree); err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(tree)
			if err != nil {
				t.Fatal(err)
			}
			var b bootstrapv3.Bootstrap
			if err := protojson.Unmarshal(js, &b); err != nil {
				t.Fatalf("not an Envoy bootstrap: %v", err)
			}
			if err := b.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			n := validateAnys(t, b.ProtoReflect())
			t.Logf("%d typed configs validated", n)
			if n < c.least {
				t.Errorf("validated %d typed configs, want at least %d", n, c.least)
			}
		})
	}
}

// yamlBlock returns the first ```yaml block of a Markdown text that
// starts with first.
func yamlBlock(t *testing.T, md, first string) string {
	t.Helper()
	for _, part := range strings.Split(md, "```yaml\n")[1:] {
		if body, _, ok := strings.Cut(part, "```"); ok && strings.HasPrefix(body, first) {
			return body
		}
	}
	t.Fatalf("no yaml block starting with %q", first)
	return ""
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
