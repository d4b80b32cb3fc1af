package gateway

import (
	"bytes"
	"context"
	"encoding/xml"
	"fmt"
	"slices"
	"sort"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// The console's edit of an entity's properties goes through the ATOM
// API's own mapping: the entity's description as a GET writes it, with
// the properties the operator changed put in, read back by the decoder a
// PUT uses (DecodeQueue, DecodeTopic, DecodeSubscription) and applied as
// a PUT with If-Match does (replaceQueue, ...). So the console accepts
// exactly what the admin clients may send, in the same notation (ISO 8601
// durations, Active/Disabled/...), refuses the same values with the same
// reasons, and keeps what it does not change. Properties fixed at
// creation are refused when changed, as on an update.

// consoleUpdate changes the properties in in.Properties (element name ->
// its text in a description) of the entity in.Name.
func (g *Gateway) consoleUpdate(ctx context.Context, in consoleAction) (any, error) {
	if len(in.Properties) == 0 {
		return nil, fmt.Errorf("%w: no property to change", ErrBadProperty)
	}
	if _, ok := in.Properties["AuthorizationRules"]; ok {
		return nil, fmt.Errorf("%w: AuthorizationRules: not edited here; use an admin client or quorumbus auth-rule", ErrBadProperty)
	}
	e, err := g.cfg.Catalog.GetEntity(ctx, &placementpb.GetEntityRequest{Name: in.Name})
	if err != nil {
		return nil, err
	}
	if e, err = g.updateDescribed(ctx, e, in.Properties); err != nil {
		return nil, err
	}
	return g.consoleEntity(ctx, e.GetName())
}

// updateDescribed applies the changes set to e's description, by its kind.
func (g *Gateway) updateDescribed(ctx context.Context, e *placementpb.Entity, set map[string]string) (*placementpb.Entity, error) {
	switch e.GetKind() {
	case placementpb.EntityKind_ENTITY_KIND_QUEUE:
		fields, err := patchedFields(describeQueue(e, nil, nil), set)
		if err != nil {
			return nil, err
		}
		req, err := DecodeQueue(fields)
		if err != nil {
			return nil, err
		}
		return g.replaceQueue(ctx, e.GetName(), req)
	case placementpb.EntityKind_ENTITY_KIND_TOPIC:
		fields, err := patchedFields(describeTopic(e, topicFigures{}, nil), set)
		if err != nil {
			return nil, err
		}
		req, err := DecodeTopic(fields)
		if err != nil {
			return nil, err
		}
		return g.replaceTopic(ctx, e.GetName(), req)
	case placementpb.EntityKind_ENTITY_KIND_SUBSCRIPTION:
		fields, err := patchedFields(describeSubscription(e, nil), set)
		if err != nil {
			return nil, err
		}
		req, err := DecodeSubscription(fields)
		if err != nil {
			return nil, err
		}
		return g.replaceSubscription(ctx, e.GetName(), req)
	}
	return nil, fmt.Errorf("%w: %s is a %s", ErrNotFound, e.GetName(), e.GetKind())
}

// patchedFields writes desc as XML and reads its elements back as a
// request's, with the text of those named in set replaced (or added, for
// one the description leaves out). The description's AuthorizationRules
// are left out: the console does not read the rules, and an update
// without the element keeps them, where an empty one would delete them.
func patchedFields(desc any, set map[string]string) ([]rawField, error) {
	b, err := xml.Marshal(desc)
	if err != nil {
		return nil, fmt.Errorf("gateway: writing a description: %w", err)
	}
	var d rawDescription
	if err := xml.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("gateway: reading a description back: %w", err)
	}
	d.Fields = slices.DeleteFunc(d.Fields, func(f rawField) bool { return f.XMLName.Local == "AuthorizationRules" })
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	sort.Strings(names) // added ones in a stable order
	for _, name := range names {
		var inner bytes.Buffer
		if err := xml.EscapeText(&inner, []byte(set[name])); err != nil {
			return nil, err
		}
		f := rawField{XMLName: xml.Name{Local: name}, Text: set[name], Inner: inner.String()}
		replaced := false
		for i := range d.Fields {
			if d.Fields[i].XMLName.Local == name {
				d.Fields[i], replaced = f, true
			}
		}
		if !replaced {
			d.Fields = append(d.Fields, f)
		}
	}
	return d.Fields, nil
}
