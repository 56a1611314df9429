package rls

import (
	"strings"

	ratelimitpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is the response's dynamic_metadata in
// envoyproxy/ratelimit's structure (RESPONSE_DYNAMIC_METADATA), which
// Envoy can route or log on:
//
//	domain       the request's domain
//	descriptors  one struct per descriptor: entries ["key=value", …], and
//	             limit (the override, in protobuf text) and hitsAddend
//	             when the descriptor sets them
//	hitsAddend   the request's hits_addend, when not 0
//	metadata     the metadata of the rules of the descriptors that passed
//	             (not OVER_LIMIT), merged in request order: the first
//	             descriptor to set a field wins, and structs merge field by
//	             field
//
// A multi-service token quota uses it: each service is a quota_mode
// descriptor checked with hits_addend 0 whose rule names the service in
// its metadata, and Envoy routes to the service named there.
func dynamicMetadata(req *rlspb.RateLimitRequest, p *request, resp *rlspb.RateLimitResponse) *structpb.Struct {
	fields := map[string]*structpb.Value{
		"domain": structpb.NewStringValue(req.GetDomain()),
	}
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		ds = append(ds, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range p.descs {
		d := &p.descs[i]
		if d.metadata == nil || d.kind == unlimited || d.kind == replaced || resp.Statuses[i].Code == rlspb.RateLimitResponse_OVER_LIMIT {
			continue
		}
		// The rules file holds only values with a JSON form (rules.Match);
		// one that still fails to convert is left out, not the response.
		if md, err := structpb.NewStruct(d.metadata); err == nil {
			mergeStruct(passed, md)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct is one descriptor of dynamicMetadata.
func descriptorStruct(d *ratelimitpb.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{
		"entries": structpb.NewListValue(&structpb.ListValue{Values: entries}),
	}
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(strings.TrimSpace(prototext.MarshalOptions{}.Format(o)))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct adds src's fields to dst: a field dst lacks is added; one
// both hold as structs is merged the same way; any other field dst
// already holds is kept.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = v
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeStruct(have.GetStructValue(), v.GetStructValue())
		}
	}
}
