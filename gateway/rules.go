package gateway

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// A rule's XML (RuleDescription, and a subscription's
// DefaultRuleDescription) is read here into placementpb.RuleDescription,
// the one mapping onto the catalog's Rule; the catalog compiles the
// filter and action and refuses one that does not compile with its
// position.

// maxRuleValues bounds the parameters or properties of one filter or
// action, so a request cannot grow one without limit.
const maxRuleValues = 1000

// DecodeRuleXML reads the children of a RuleDescription or
// DefaultRuleDescription element (Filter, Action, Name, CreatedAt).
func DecodeRuleXML(inner []byte) (*placementpb.Rule, error) {
	fields, err := childFields(inner)
	if err != nil {
		return nil, err
	}
	return DecodeRule(fields)
}

// childFields parses a run of elements (an element's inner XML).
func childFields(inner []byte) ([]rawField, error) {
	var w struct {
		Fields []rawField `xml:",any"`
	}
	doc := make([]byte, 0, len(inner)+7)
	doc = append(append(append(doc, "<x>"...), inner...), "</x>"...)
	if err := xml.NewDecoder(bytes.NewReader(doc)).Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadXML, err)
	}
	return w.Fields, nil
}

// DecodeRule reads a rule's property elements. A rule with no Filter
// gets a true filter, as on Service Bus.
func DecodeRule(fields []rawField) (*placementpb.Rule, error) {
	d := placementpb.RuleDescription{FilterType: "True"}
	seen := map[string]bool{}
	for _, f := range fields {
		name := f.XMLName.Local
		if seen[name] {
			return nil, badProperty(name, "given twice")
		}
		seen[name] = true
		var err error
		switch name {
		case "Name":
			d.Name = strings.TrimSpace(f.Text)
		case "CreatedAt", "ModifiedAt":
			// Read-only: the catalog stamps a rule when it adds it.
		case "Filter":
			err = decodeFilter(f, &d)
		case "Action":
			err = decodeAction(f, &d)
		default:
			return nil, badProperty(name, "unknown property of a rule")
		}
		if err != nil {
			return nil, err
		}
	}
	r, err := d.Rule()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadProperty, err)
	}
	return r, nil
}

// xsiType is an element's i:type, without its prefix.
func xsiType(attrs []xml.Attr) string {
	for _, a := range attrs {
		if a.Name.Local == "type" {
			t := strings.TrimSpace(a.Value)
			if i := strings.IndexByte(t, ':'); i >= 0 {
				t = t[i+1:]
			}
			return t
		}
	}
	return ""
}

func decodeFilter(f rawField, d *placementpb.RuleDescription) error {
	kind := xsiType(f.Attrs)
	children, err := childFields([]byte(f.Inner))
	if err != nil {
		return err
	}
	bad := func(name, format string, args ...any) error {
		return badProperty("Filter", "%s: %s", name, fmt.Sprintf(format, args...))
	}
	switch kind {
	case "SqlFilter", "TrueFilter", "FalseFilter":
		d.FilterType = strings.TrimSuffix(kind, "Filter")
		if kind == "SqlFilter" {
			d.FilterType = "Sql"
		}
		for _, c := range children {
			switch c.XMLName.Local {
			case "SqlExpression":
				// A true or false filter's expression is 1=1 or 1=0;
				// its type says what it is.
				if kind == "SqlFilter" {
					d.SqlExpression = c.Text
				}
			case "CompatibilityLevel":
				if err := compatibilityLevel(c); err != nil {
					return bad("CompatibilityLevel", "%v", err)
				}
			case "RequiresPreprocessing":
				// Computed by Service Bus; ignored as read-only.
			case "Parameters":
				if kind != "SqlFilter" {
					return bad("Parameters", "a %s takes none", kind)
				}
				if d.SqlParameters, err = decodeValues(c); err != nil {
					return bad("Parameters", "%v", err)
				}
			default:
				return bad(c.XMLName.Local, "unknown property of a %s", kind)
			}
		}
		if kind == "SqlFilter" && strings.TrimSpace(d.SqlExpression) == "" {
			return bad("SqlExpression", "a SQL filter needs an expression")
		}
	case "CorrelationFilter":
		d.FilterType = "Correlation"
		c := &d.Correlation
		for _, ch := range children {
			text := ch.Text
			switch ch.XMLName.Local {
			case "CorrelationId":
				c.CorrelationID = text
			case "MessageId":
				c.MessageID = text
			case "To":
				c.To = text
			case "ReplyTo":
				c.ReplyTo = text
			case "Label":
				c.Label = text
			case "Subject":
				c.Subject = text
			case "SessionId":
				c.SessionID = text
			case "ReplyToSessionId":
				c.ReplyToSessionID = text
			case "ContentType":
				c.ContentType = text
			case "Properties":
				if c.Properties, err = decodeValues(ch); err != nil {
					return bad("Properties", "%v", err)
				}
			default:
				return bad(ch.XMLName.Local, "unknown property of a CorrelationFilter")
			}
		}
	case "":
		return badProperty("Filter", "no i:type (SqlFilter, CorrelationFilter, TrueFilter or FalseFilter)")
	default:
		return badProperty("Filter", "type %q is not one of SqlFilter, CorrelationFilter, TrueFilter, FalseFilter", kind)
	}
	return nil
}

func decodeAction(f rawField, d *placementpb.RuleDescription) error {
	kind := xsiType(f.Attrs)
	if f.isNil() || kind == "EmptyRuleAction" {
		return nil
	}
	if kind != "SqlRuleAction" {
		return badProperty("Action", "type %q is not SqlRuleAction or EmptyRuleAction", kind)
	}
	children, err := childFields([]byte(f.Inner))
	if err != nil {
		return err
	}
	for _, c := range children {
		switch c.XMLName.Local {
		case "SqlExpression":
			d.ActionExpression = c.Text
		case "CompatibilityLevel":
			if err := compatibilityLevel(c); err != nil {
				return badProperty("Action", "CompatibilityLevel: %v", err)
			}
		case "RequiresPreprocessing":
		case "Parameters":
			if d.ActionParameters, err = decodeValues(c); err != nil {
				return badProperty("Action", "Parameters: %v", err)
			}
		default:
			return badProperty("Action", "%s: unknown property of a SqlRuleAction", c.XMLName.Local)
		}
	}
	if strings.TrimSpace(d.ActionExpression) == "" {
		return badProperty("Action", "a SqlRuleAction needs an expression")
	}
	return nil
}

// compatibilityLevel accepts the one level Service Bus has, 20.
func compatibilityLevel(f rawField) error {
	if t := strings.TrimSpace(f.Text); t != "20" {
		return fmt.Errorf("%q: only 20", t)
	}
	return nil
}

// valueIn is one KeyValueOfstringanyType.
type valueIn struct {
	Key   *string `xml:"Key"`
	Value *struct {
		Attrs []xml.Attr `xml:",any,attr"`
		Text  string     `xml:",chardata"`
		Inner string     `xml:",innerxml"`
	} `xml:"Value"`
	Other []rawField `xml:",any"`
}

// decodeValues reads a Parameters or Properties element: a list of
// KeyValueOfstringanyType with xsd-typed values.
func decodeValues(f rawField) (map[string]any, error) {
	var w struct {
		KVs   []valueIn  `xml:"KeyValueOfstringanyType"`
		Other []rawField `xml:",any"`
	}
	doc := "<x>" + f.Inner + "</x>"
	if err := xml.Unmarshal([]byte(doc), &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadXML, err)
	}
	if len(w.Other) > 0 {
		return nil, fmt.Errorf("unexpected <%s>; expected KeyValueOfstringanyType", w.Other[0].XMLName.Local)
	}
	if len(w.KVs) > maxRuleValues {
		return nil, fmt.Errorf("%d values, at most %d", len(w.KVs), maxRuleValues)
	}
	out := make(map[string]any, len(w.KVs))
	for _, kv := range w.KVs {
		if kv.Key == nil || kv.Value == nil || len(kv.Other) > 0 {
			return nil, errors.New("each KeyValueOfstringanyType needs a Key and a Value, and nothing else")
		}
		key := *kv.Key
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%q given twice", key)
		}
		if strings.Contains(kv.Value.Inner, "<") {
			return nil, fmt.Errorf("%q: expected a value, got elements", key)
		}
		for _, a := range kv.Value.Attrs {
			if a.Name.Local == "nil" && strings.TrimSpace(a.Value) == "true" {
				return nil, fmt.Errorf("%q: a null value cannot be matched", key)
			}
		}
		v, err := parseValue(xsiType(kv.Value.Attrs), kv.Value.Text)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", key, err)
		}
		out[key] = v
	}
	return out, nil
}

// parseValue reads an xsd-typed value into the Go types
// placementpb.NewRuleValue takes.
func parseValue(typ, text string) (any, error) {
	t := strings.TrimSpace(text)
	switch typ {
	case "string":
		return text, nil
	case "boolean":
		return parseBool(t)
	case "int", "long", "short", "byte", "unsignedByte", "unsignedShort", "unsignedInt":
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", t)
		}
		return n, nil
	case "double", "float", "decimal":
		x, err := strconv.ParseFloat(t, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, fmt.Errorf("%q is not a finite number", t)
		}
		return x, nil
	case "dateTime":
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
			if ts, err := time.Parse(layout, t); err == nil {
				return ts.UTC(), nil
			}
		}
		return nil, fmt.Errorf("%q is not a date and time", t)
	case "duration":
		neg := strings.HasPrefix(t, "-")
		d, err := placementpb.ParseISODuration(strings.TrimPrefix(t, "-"))
		if err != nil {
			return nil, err
		}
		if neg {
			d = -d
		}
		return d, nil
	case "":
		return nil, errors.New("the value has no i:type")
	}
	return nil, fmt.Errorf("type %q is not supported (string, boolean, int, long, double, dateTime, duration)", typ)
}

// ruleDescriptionOut is a rule as the ATOM API describes it.
type ruleDescriptionOut struct {
	XMLName   xml.Name  `xml:"RuleDescription"`
	NS        string    `xml:"xmlns,attr"`
	NSI       string    `xml:"xmlns:i,attr"`
	Filter    filterOut `xml:"Filter"`
	Action    actionOut `xml:"Action"`
	CreatedAt string    `xml:"CreatedAt"`
	Name      string    `xml:"Name"`
}

type filterOut struct {
	Type               string     `xml:"i:type,attr"`
	CorrelationID      string     `xml:"CorrelationId,omitempty"`
	MessageID          string     `xml:"MessageId,omitempty"`
	To                 string     `xml:"To,omitempty"`
	ReplyTo            string     `xml:"ReplyTo,omitempty"`
	Label              string     `xml:"Label,omitempty"`
	SessionID          string     `xml:"SessionId,omitempty"`
	ReplyToSessionID   string     `xml:"ReplyToSessionId,omitempty"`
	ContentType        string     `xml:"ContentType,omitempty"`
	Properties         *valuesOut `xml:"Properties,omitempty"`
	SQLExpression      *string    `xml:"SqlExpression,omitempty"`
	CompatibilityLevel int        `xml:"CompatibilityLevel,omitempty"`
	Parameters         *valuesOut `xml:"Parameters,omitempty"`
}

type actionOut struct {
	Type               string     `xml:"i:type,attr"`
	SQLExpression      string     `xml:"SqlExpression,omitempty"`
	CompatibilityLevel int        `xml:"CompatibilityLevel,omitempty"`
	Parameters         *valuesOut `xml:"Parameters,omitempty"`
}

type valuesOut struct {
	KVs []keyValueOut `xml:"KeyValueOfstringanyType"`
}

type keyValueOut struct {
	Key   string   `xml:"Key"`
	Value valueOut `xml:"Value"`
}

type valueOut struct {
	Type string `xml:"i:type,attr"`
	NS   string `xml:"xmlns:d6p1,attr"`
	Text string `xml:",chardata"`
}

const xsdNS = "http://www.w3.org/2001/XMLSchema"

// valuesXML writes rule values as typed KeyValueOfstringanyType, ordered
// by key. Integers in int32's range are xsd int (the only integer type
// the Go admin client reads), larger ones long.
func valuesXML(m map[string]any) *valuesOut {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := &valuesOut{}
	for _, k := range keys {
		var typ, text string
		switch v := m[k].(type) {
		case string:
			typ, text = "string", v
		case bool:
			typ, text = "boolean", strconv.FormatBool(v)
		case int64:
			typ, text = "int", strconv.FormatInt(v, 10)
			if v < math.MinInt32 || v > math.MaxInt32 {
				typ = "long"
			}
		case float64:
			typ, text = "double", strconv.FormatFloat(v, 'g', -1, 64)
		case time.Time:
			typ, text = "dateTime", v.UTC().Format(time.RFC3339Nano)
		case time.Duration:
			typ = "duration"
			if v < 0 {
				text, v = "-", -v
			}
			text += placementpb.FormatISODuration(v)
		default:
			typ, text = "string", fmt.Sprint(v)
		}
		out.KVs = append(out.KVs, keyValueOut{Key: k, Value: valueOut{Type: "d6p1:" + typ, NS: xsdNS, Text: text}})
	}
	return out
}

// sqlCompatibilityLevel is the one level Service Bus writes.
const sqlCompatibilityLevel = 20

func describeRule(r *placementpb.Rule) *ruleDescriptionOut {
	d := placementpb.RuleDescriptionOf(r)
	out := &ruleDescriptionOut{
		NS: sbNS, NSI: xsiNS,
		CreatedAt: atomTime(msTime(r.GetCreatedAtMs())),
		Name:      d.Name,
		Action:    actionOut{Type: "EmptyRuleAction"},
	}
	expr := func(s string) *string { return &s }
	switch d.FilterType {
	case "Sql":
		out.Filter = filterOut{Type: "SqlFilter", SQLExpression: expr(d.SqlExpression),
			CompatibilityLevel: sqlCompatibilityLevel, Parameters: valuesXML(d.SqlParameters)}
	case "Correlation":
		c := d.Correlation
		out.Filter = filterOut{Type: "CorrelationFilter",
			CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To, ReplyTo: c.ReplyTo,
			Label: c.Subject, SessionID: c.SessionID, ReplyToSessionID: c.ReplyToSessionID,
			ContentType: c.ContentType, Properties: valuesXML(c.Properties)}
	case "False":
		out.Filter = filterOut{Type: "FalseFilter", SQLExpression: expr("1=0"), CompatibilityLevel: sqlCompatibilityLevel}
	default:
		out.Filter = filterOut{Type: "TrueFilter", SQLExpression: expr("1=1"), CompatibilityLevel: sqlCompatibilityLevel}
	}
	if d.ActionExpression != "" {
		out.Action = actionOut{Type: "SqlRuleAction", SQLExpression: d.ActionExpression,
			CompatibilityLevel: sqlCompatibilityLevel, Parameters: valuesXML(d.ActionParameters)}
	}
	return out
}
