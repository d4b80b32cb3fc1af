package gateway

import (
	"encoding/xml"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// ErrBadProperty: a property the request sets has a malformed value, a
// value quorumbus does not support, or is unknown; answered 400 with the
// reason, so nothing a client asks for is silently dropped.
var ErrBadProperty = errors.New("gateway: invalid entity property")

// queueRequest is what a PUT of a QueueDescription asks for.
type queueRequest struct {
	desc   placementpb.QueueDescription
	status placementpb.EntityStatus
	// set names the properties the request carried (by element name), so
	// an update can tell "false" from "not said".
	set   map[string]bool
	rules rulesRequest
}

// statusNames maps Service Bus's EntityStatus onto the catalog's. The
// transitional states (Creating, Deleting, ...) cannot be asked for.
var statusNames = map[string]placementpb.EntityStatus{
	"Active":          placementpb.EntityStatus_ENTITY_STATUS_ACTIVE,
	"Disabled":        placementpb.EntityStatus_ENTITY_STATUS_DISABLED,
	"SendDisabled":    placementpb.EntityStatus_ENTITY_STATUS_SEND_DISABLED,
	"ReceiveDisabled": placementpb.EntityStatus_ENTITY_STATUS_RECEIVE_DISABLED,
}

func statusName(s placementpb.EntityStatus) string {
	for name, v := range statusNames {
		if v == s {
			return name
		}
	}
	return "Unknown"
}

// readOnlyQueueFields are what a GET answers and a client may send back
// unchanged in an update; Service Bus ignores them on a PUT, and so do we.
var readOnlyQueueFields = map[string]bool{
	"SizeInBytes": true, "MessageCount": true, "CountDetails": true,
	"CreatedAt": true, "UpdatedAt": true, "AccessedAt": true,
	"EntityAvailabilityStatus": true,
}

// DecodeQueue reads the properties of a QueueDescription. Every element is
// either honoured, ignored because it is read-only, or refused with
// ErrBadProperty and the reason.
func DecodeQueue(fields []rawField) (queueRequest, error) {
	q := queueRequest{set: make(map[string]bool, len(fields))}
	bad := func(name, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadProperty, name, fmt.Sprintf(format, args...))
	}
	for _, f := range fields {
		name := f.XMLName.Local
		text := strings.TrimSpace(f.Text)
		if readOnlyQueueFields[name] {
			continue
		}
		if f.isNil() {
			continue // unset: the default
		}
		if name != "AuthorizationRules" && f.hasChildren() {
			return q, bad(name, "expected a value, got elements")
		}
		q.set[name] = true
		var err error
		switch name {
		case "LockDuration":
			q.desc.LockDuration, err = parseDuration(text)
		case "DefaultMessageTimeToLive":
			q.desc.DefaultMessageTimeToLive, err = parseDuration(text)
		case "DuplicateDetectionHistoryTimeWindow":
			q.desc.DuplicateDetectionHistoryTimeWindow, err = parseDuration(text)
		case "MaxSizeInMegabytes":
			q.desc.MaxSizeInMegabytes, err = parsePositive(text)
		case "MaxMessageSizeInKilobytes":
			q.desc.MaxMessageSizeInKilobytes, err = parsePositive(text)
		case "MaxDeliveryCount":
			var n int64
			n, err = parsePositive(text)
			if err == nil && n > 1<<31-1 {
				err = errors.New("too large")
			}
			q.desc.MaxDeliveryCount = uint32(n)
		case "RequiresSession":
			q.desc.RequiresSession, err = parseBool(text)
		case "RequiresDuplicateDetection":
			q.desc.RequiresDuplicateDetection, err = parseBool(text)
		case "DeadLetteringOnMessageExpiration":
			q.desc.DeadLetteringOnMessageExpiration, err = parseBool(text)
		case "EnablePartitioning":
			q.desc.EnablePartitioning, err = parseBool(text)
		case "Status":
			s, ok := statusNames[text]
			if !ok {
				return q, bad(name, "%q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", text)
			}
			q.status = s
		case "EnableBatchedOperations":
			// quorumbus always batches (group commit); only the
			// value that describes it is accepted.
			err = mustBe(text, true, "quorumbus always batches operations")
		case "SupportOrdering":
			err = mustBe(text, true, "quorumbus always keeps order within a partition")
		case "EnableExpress", "IsAnonymousAccessible":
			err = mustBe(text, false, "not supported")
		case "AutoDeleteOnIdle":
			var d time.Duration
			if d, err = parseDuration(text); err == nil && d < placementpb.NeverExpires {
				err = errors.New("deleting idle entities is not implemented; only the default (forever) is accepted")
			}
		case "AuthorizationRules":
			q.rules.given = true
			q.rules.rules, err = decodeAuthorizationRules(f)
		case "ForwardTo":
			q.desc.ForwardTo, err = forwardTarget(text)
		case "ForwardDeadLetteredMessagesTo":
			q.desc.ForwardDeadLetteredMessagesTo, err = forwardTarget(text)
		case "UserMetadata":
			// Text, not trimmed: the user's string as given.
			q.desc.UserMetadata = f.Text
			if n := utf8.RuneCountInString(f.Text); n > maxUserMetadata {
				err = fmt.Errorf("%d characters, at most %d", n, maxUserMetadata)
			}
		default:
			return q, bad(name, "unknown property of a queue")
		}
		if err != nil {
			return q, bad(name, "%v", err)
		}
	}
	return q, nil
}

// maxUserMetadata is Service Bus's limit on UserMetadata, in characters.
const maxUserMetadata = 1024

func parseDuration(s string) (time.Duration, error) {
	d, err := placementpb.ParseISODuration(s)
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("duration %q is not positive", s)
	}
	return d, nil
}

func parsePositive(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%d is not positive", n)
	}
	return n, nil
}

// parseBool reads an xsd:boolean.
func parseBool(s string) (bool, error) {
	switch s {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", s)
}

func mustBe(s string, want bool, why string) error {
	v, err := parseBool(s)
	if err != nil {
		return err
	}
	if v != want {
		return fmt.Errorf("only %t: %s", want, why)
	}
	return nil
}

// queueDescriptionOut is a queue as the ATOM API describes it, elements
// in the order Service Bus writes them (the .NET client's deserializer
// reads them in order).
type queueDescriptionOut struct {
	XMLName                             xml.Name              `xml:"QueueDescription"`
	NS                                  string                `xml:"xmlns,attr"`
	NSI                                 string                `xml:"xmlns:i,attr"`
	LockDuration                        string                `xml:"LockDuration"`
	MaxSizeInMegabytes                  int64                 `xml:"MaxSizeInMegabytes"`
	RequiresDuplicateDetection          bool                  `xml:"RequiresDuplicateDetection"`
	RequiresSession                     bool                  `xml:"RequiresSession"`
	DefaultMessageTimeToLive            string                `xml:"DefaultMessageTimeToLive"`
	DeadLetteringOnMessageExpiration    bool                  `xml:"DeadLetteringOnMessageExpiration"`
	DuplicateDetectionHistoryTimeWindow string                `xml:"DuplicateDetectionHistoryTimeWindow"`
	MaxDeliveryCount                    uint32                `xml:"MaxDeliveryCount"`
	EnableBatchedOperations             bool                  `xml:"EnableBatchedOperations"`
	SizeInBytes                         *uint64               `xml:"SizeInBytes,omitempty"`
	MessageCount                        *uint64               `xml:"MessageCount,omitempty"`
	IsAnonymousAccessible               bool                  `xml:"IsAnonymousAccessible"`
	AuthorizationRules                  authorizationRulesOut `xml:"AuthorizationRules"`
	Status                              string                `xml:"Status"`
	CreatedAt                           string                `xml:"CreatedAt"`
	UpdatedAt                           string                `xml:"UpdatedAt"`
	AccessedAt                          string                `xml:"AccessedAt"`
	SupportOrdering                     bool                  `xml:"SupportOrdering"`
	CountDetails                        *countDetailsOut      `xml:"CountDetails,omitempty"`
	AutoDeleteOnIdle                    string                `xml:"AutoDeleteOnIdle"`
	EnablePartitioning                  bool                  `xml:"EnablePartitioning"`
	EntityAvailabilityStatus            string                `xml:"EntityAvailabilityStatus"`
	EnableExpress                       bool                  `xml:"EnableExpress"`
	ForwardTo                           string                `xml:"ForwardTo,omitempty"`
	UserMetadata                        string                `xml:"UserMetadata,omitempty"`
	ForwardDeadLetteredMessagesTo       string                `xml:"ForwardDeadLetteredMessagesTo,omitempty"`
	MaxMessageSizeInKilobytes           int64                 `xml:"MaxMessageSizeInKilobytes"`
}

// Counts are an entity's runtime figures, summed over its partitions.
type Counts struct {
	Active, DeadLetter, Scheduled, SizeBytes uint64
	// AccessedAtMs is the last send to or receive from any partition
	// (unix ms); 0: never.
	AccessedAtMs int64 `json:"-"`
}

// describeQueue writes a catalog entity as a QueueDescription with its
// authorization rules; counts nil leaves the runtime figures out (they
// could not be read).
func describeQueue(e *placementpb.Entity, counts *Counts, rules []*placementpb.AuthorizationRule) *queueDescriptionOut {
	d := placementpb.Describe(e.GetProperties())
	availability := "Available"
	if e.GetDegraded() {
		availability = "Limited"
	}
	out := &queueDescriptionOut{
		NS:                                  sbNS,
		NSI:                                 xsiNS,
		LockDuration:                        placementpb.FormatISODuration(d.LockDuration),
		MaxSizeInMegabytes:                  d.MaxSizeInMegabytes,
		RequiresDuplicateDetection:          d.RequiresDuplicateDetection,
		RequiresSession:                     d.RequiresSession,
		DefaultMessageTimeToLive:            placementpb.FormatISODuration(d.DefaultMessageTimeToLive),
		DeadLetteringOnMessageExpiration:    d.DeadLetteringOnMessageExpiration,
		DuplicateDetectionHistoryTimeWindow: placementpb.FormatISODuration(d.DuplicateDetectionHistoryTimeWindow),
		MaxDeliveryCount:                    d.MaxDeliveryCount,
		EnableBatchedOperations:             true,
		AuthorizationRules:                  describeAuthorizationRules(rules),
		Status:                              statusName(e.GetStatus()),
		CreatedAt:                           atomTime(msTime(e.GetCreatedAtMs())),
		UpdatedAt:                           atomTime(msTime(e.GetUpdatedAtMs())),
		AccessedAt:                          accessedAt(counts),
		SupportOrdering:                     true,
		AutoDeleteOnIdle:                    placementpb.ForeverISO,
		EnablePartitioning:                  d.EnablePartitioning,
		EntityAvailabilityStatus:            availability,
		UserMetadata:                        d.UserMetadata,
		MaxMessageSizeInKilobytes:           d.MaxMessageSizeInKilobytes,
		// Names, where Service Bus answers URLs: the SDKs take either.
		ForwardTo:                     d.ForwardTo,
		ForwardDeadLetteredMessagesTo: d.ForwardDeadLetteredMessagesTo,
	}
	if counts != nil {
		total := counts.Active + counts.DeadLetter + counts.Scheduled
		out.SizeInBytes, out.MessageCount = &counts.SizeBytes, &total
		out.CountDetails = countDetails(counts, d.ForwardTo)
	}
	return out
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
