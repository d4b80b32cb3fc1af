package gateway

import (
	"encoding/xml"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// topicRequest is what a PUT of a TopicDescription asks for.
type topicRequest struct {
	desc   placementpb.TopicDescription
	status placementpb.EntityStatus
	set    map[string]bool
	rules  rulesRequest
}

// readOnlyTopicFields are what a GET answers and a client may send back.
var readOnlyTopicFields = map[string]bool{
	"SizeInBytes": true, "CountDetails": true, "MessageCount": true,
	"CreatedAt": true, "UpdatedAt": true, "AccessedAt": true,
	"SubscriptionCount": true, "SqlFilterCount": true, "CorrelationFilterCount": true,
	"EntityAvailabilityStatus": true,
}

// sharedProperty reads a property that queues, topics and subscriptions
// take alike when it is only accepted at the value describing quorumbus;
// handled is false for any other name.
func sharedProperty(f rawField, text string) (handled bool, err error) {
	switch f.XMLName.Local {
	case "EnableBatchedOperations":
		return true, mustBe(text, true, "quorumbus always batches operations")
	case "SupportOrdering":
		return true, mustBe(text, true, "quorumbus always keeps order within a partition")
	case "EnableExpress", "IsAnonymousAccessible", "FilteringMessagesBeforePublishing", "EnableSubscriptionPartitioning":
		return true, mustBe(text, false, "not supported")
	case "AutoDeleteOnIdle":
		d, err := parseDuration(text)
		if err == nil && d < placementpb.NeverExpires {
			err = errors.New("deleting idle entities is not implemented; only the default (forever) is accepted")
		}
		return true, err
	case "AuthorizationRules":
		// Queues and topics read theirs (authrules.go); a subscription
		// has its topic's, as on Service Bus.
		if f.hasChildren() {
			return true, errors.New("a subscription has its topic's authorization rules and none of its own")
		}
		return true, nil
	case "ForwardTo", "ForwardDeadLetteredMessagesTo":
		// Queues and subscriptions read these themselves: a topic does
		// not forward.
		if text != "" {
			return true, errors.New("a topic does not forward; forward from its subscriptions")
		}
		return true, nil
	}
	return false, nil
}

// userMetadata reads UserMetadata as given (not trimmed), at most
// maxUserMetadata characters.
func userMetadata(f rawField) (string, error) {
	if n := utf8.RuneCountInString(f.Text); n > maxUserMetadata {
		return "", fmt.Errorf("%d characters, at most %d", n, maxUserMetadata)
	}
	return f.Text, nil
}

func badProperty(name, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrBadProperty, name, fmt.Sprintf(format, args...))
}

// DecodeTopic reads the properties of a TopicDescription: each honoured,
// ignored as read-only, or refused with ErrBadProperty and the reason.
func DecodeTopic(fields []rawField) (topicRequest, error) {
	t := topicRequest{set: make(map[string]bool, len(fields))}
	for _, f := range fields {
		name := f.XMLName.Local
		text := strings.TrimSpace(f.Text)
		if readOnlyTopicFields[name] || f.isNil() {
			continue
		}
		if name != "AuthorizationRules" && f.hasChildren() {
			return t, badProperty(name, "expected a value, got elements")
		}
		t.set[name] = true
		var err error
		switch name {
		case "DefaultMessageTimeToLive":
			t.desc.DefaultMessageTimeToLive, err = parseDuration(text)
		case "DuplicateDetectionHistoryTimeWindow":
			t.desc.DuplicateDetectionHistoryTimeWindow, err = parseDuration(text)
		case "MaxSizeInMegabytes":
			t.desc.MaxSizeInMegabytes, err = parsePositive(text)
		case "MaxMessageSizeInKilobytes":
			t.desc.MaxMessageSizeInKilobytes, err = parsePositive(text)
		case "RequiresDuplicateDetection":
			t.desc.RequiresDuplicateDetection, err = parseBool(text)
		case "EnablePartitioning":
			t.desc.EnablePartitioning, err = parseBool(text)
		case "Status":
			s, ok := statusNames[text]
			if !ok {
				return t, badProperty(name, "%q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", text)
			}
			t.status = s
		case "UserMetadata":
			t.desc.UserMetadata, err = userMetadata(f)
		case "AuthorizationRules":
			t.rules.given = true
			t.rules.rules, err = decodeAuthorizationRules(f)
		default:
			var handled bool
			if handled, err = sharedProperty(f, text); !handled {
				return t, badProperty(name, "unknown property of a topic")
			}
		}
		if err != nil {
			return t, badProperty(name, "%v", err)
		}
	}
	return t, nil
}

// topicDescriptionOut is a topic as the ATOM API describes it, elements
// in Service Bus's order.
type topicDescriptionOut struct {
	XMLName                             xml.Name              `xml:"TopicDescription"`
	NS                                  string                `xml:"xmlns,attr"`
	NSI                                 string                `xml:"xmlns:i,attr"`
	DefaultMessageTimeToLive            string                `xml:"DefaultMessageTimeToLive"`
	MaxSizeInMegabytes                  int64                 `xml:"MaxSizeInMegabytes"`
	RequiresDuplicateDetection          bool                  `xml:"RequiresDuplicateDetection"`
	DuplicateDetectionHistoryTimeWindow string                `xml:"DuplicateDetectionHistoryTimeWindow"`
	EnableBatchedOperations             bool                  `xml:"EnableBatchedOperations"`
	SizeInBytes                         *uint64               `xml:"SizeInBytes,omitempty"`
	FilteringMessagesBeforePublishing   bool                  `xml:"FilteringMessagesBeforePublishing"`
	IsAnonymousAccessible               bool                  `xml:"IsAnonymousAccessible"`
	AuthorizationRules                  authorizationRulesOut `xml:"AuthorizationRules"`
	Status                              string                `xml:"Status"`
	CreatedAt                           string                `xml:"CreatedAt"`
	UpdatedAt                           string                `xml:"UpdatedAt"`
	AccessedAt                          string                `xml:"AccessedAt"`
	SupportOrdering                     bool                  `xml:"SupportOrdering"`
	CountDetails                        *countDetailsOut      `xml:"CountDetails,omitempty"`
	SubscriptionCount                   *int                  `xml:"SubscriptionCount,omitempty"`
	SQLFilterCount                      *int                  `xml:"SqlFilterCount,omitempty"`
	CorrelationFilterCount              *int                  `xml:"CorrelationFilterCount,omitempty"`
	AutoDeleteOnIdle                    string                `xml:"AutoDeleteOnIdle"`
	EnablePartitioning                  bool                  `xml:"EnablePartitioning"`
	EntityAvailabilityStatus            string                `xml:"EntityAvailabilityStatus"`
	EnableSubscriptionPartitioning      bool                  `xml:"EnableSubscriptionPartitioning"`
	EnableExpress                       bool                  `xml:"EnableExpress"`
	UserMetadata                        string                `xml:"UserMetadata,omitempty"`
	MaxMessageSizeInKilobytes           int64                 `xml:"MaxMessageSizeInKilobytes"`
}

// topicFigures are a topic's runtime figures: its partitions' counters
// and what its subscriptions and their rules add up to. nil parts could
// not be read and are left out.
type topicFigures struct {
	counts                          *Counts
	subscriptions, sql, correlation int
	haveSubscriptions               bool
}

// describeTopic writes a catalog entity as a TopicDescription with its
// figures and authorization rules.
func describeTopic(e *placementpb.Entity, fig topicFigures, rules []*placementpb.AuthorizationRule) *topicDescriptionOut {
	d := placementpb.TopicDescriptionOf(e.GetProperties())
	ttl := d.DefaultMessageTimeToLive
	if ttl == 0 {
		ttl = placementpb.Forever
	}
	out := &topicDescriptionOut{
		NS: sbNS, NSI: xsiNS,
		DefaultMessageTimeToLive:            placementpb.FormatISODuration(ttl),
		MaxSizeInMegabytes:                  d.MaxSizeInMegabytes,
		RequiresDuplicateDetection:          d.RequiresDuplicateDetection,
		DuplicateDetectionHistoryTimeWindow: placementpb.FormatISODuration(d.DuplicateDetectionHistoryTimeWindow),
		EnableBatchedOperations:             true,
		AuthorizationRules:                  describeAuthorizationRules(rules),
		Status:                              statusName(e.GetStatus()),
		CreatedAt:                           atomTime(msTime(e.GetCreatedAtMs())),
		UpdatedAt:                           atomTime(msTime(e.GetUpdatedAtMs())),
		AccessedAt:                          accessedAt(fig.counts),
		SupportOrdering:                     true,
		AutoDeleteOnIdle:                    placementpb.ForeverISO,
		EnablePartitioning:                  d.EnablePartitioning || d.PartitionCount > 1,
		EntityAvailabilityStatus:            availability(e),
		MaxMessageSizeInKilobytes:           d.MaxMessageSizeInKilobytes,
		UserMetadata:                        d.UserMetadata,
	}
	if c := fig.counts; c != nil {
		out.SizeInBytes = &c.SizeBytes
		out.CountDetails = &countDetailsOut{
			NS:                     countNS,
			ActiveMessageCount:     int64(c.Active),
			DeadLetterMessageCount: int64(c.DeadLetter),
			ScheduledMessageCount:  int64(c.Scheduled),
		}
	}
	if fig.haveSubscriptions {
		out.SubscriptionCount, out.SQLFilterCount, out.CorrelationFilterCount = &fig.subscriptions, &fig.sql, &fig.correlation
	}
	return out
}

func availability(e *placementpb.Entity) string {
	if e.GetDegraded() {
		return "Limited"
	}
	return "Available"
}

// subscriptionRequest is what a PUT of a SubscriptionDescription asks
// for; rules is its DefaultRuleDescription, if it gives one.
type subscriptionRequest struct {
	desc   placementpb.SubscriptionDescription
	status placementpb.EntityStatus
	rules  []*placementpb.Rule
	set    map[string]bool
}

var readOnlySubscriptionFields = map[string]bool{
	"MessageCount": true, "CountDetails": true, "SizeInBytes": true,
	"CreatedAt": true, "UpdatedAt": true, "AccessedAt": true,
	"EntityAvailabilityStatus": true,
}

// DecodeSubscription reads the properties of a SubscriptionDescription,
// as DecodeTopic does a topic's.
func DecodeSubscription(fields []rawField) (subscriptionRequest, error) {
	s := subscriptionRequest{set: make(map[string]bool, len(fields))}
	for _, f := range fields {
		name := f.XMLName.Local
		text := strings.TrimSpace(f.Text)
		if readOnlySubscriptionFields[name] || f.isNil() {
			continue
		}
		if name != "AuthorizationRules" && name != "DefaultRuleDescription" && f.hasChildren() {
			return s, badProperty(name, "expected a value, got elements")
		}
		s.set[name] = true
		var err error
		switch name {
		case "LockDuration":
			s.desc.LockDuration, err = parseDuration(text)
		case "DefaultMessageTimeToLive":
			s.desc.DefaultMessageTimeToLive, err = parseDuration(text)
		case "MaxDeliveryCount":
			var n int64
			n, err = parsePositive(text)
			if err == nil && n > 1<<31-1 {
				err = errors.New("too large")
			}
			s.desc.MaxDeliveryCount = uint32(n)
		case "RequiresSession":
			s.desc.RequiresSession, err = parseBool(text)
		case "DeadLetteringOnMessageExpiration":
			s.desc.DeadLetteringOnMessageExpiration, err = parseBool(text)
		case "DeadLetteringOnFilterEvaluationExceptions":
			var v bool
			v, err = parseBool(text)
			s.desc.DeadLetteringOnFilterEvaluationExceptions = &v
		case "Status":
			st, ok := statusNames[text]
			if !ok {
				return s, badProperty(name, "%q is not one of Active, Disabled, SendDisabled, ReceiveDisabled", text)
			}
			s.status = st
		case "UserMetadata":
			s.desc.UserMetadata, err = userMetadata(f)
		case "ForwardTo":
			s.desc.ForwardTo, err = forwardTarget(text)
		case "ForwardDeadLetteredMessagesTo":
			s.desc.ForwardDeadLetteredMessagesTo, err = forwardTarget(text)
		case "DefaultRuleDescription":
			var r *placementpb.Rule
			if r, err = DecodeRuleXML([]byte(f.Inner)); err == nil {
				s.rules = []*placementpb.Rule{r}
			}
		default:
			var handled bool
			if handled, err = sharedProperty(f, text); !handled {
				return s, badProperty(name, "unknown property of a subscription")
			}
		}
		if err != nil {
			return s, badProperty(name, "%v", err)
		}
	}
	return s, nil
}

// subscriptionDescriptionOut is a subscription as the ATOM API describes
// it, elements in Service Bus's order.
type subscriptionDescriptionOut struct {
	XMLName                                   xml.Name         `xml:"SubscriptionDescription"`
	NS                                        string           `xml:"xmlns,attr"`
	NSI                                       string           `xml:"xmlns:i,attr"`
	LockDuration                              string           `xml:"LockDuration"`
	RequiresSession                           bool             `xml:"RequiresSession"`
	DefaultMessageTimeToLive                  string           `xml:"DefaultMessageTimeToLive"`
	DeadLetteringOnMessageExpiration          bool             `xml:"DeadLetteringOnMessageExpiration"`
	DeadLetteringOnFilterEvaluationExceptions bool             `xml:"DeadLetteringOnFilterEvaluationExceptions"`
	MessageCount                              *uint64          `xml:"MessageCount,omitempty"`
	MaxDeliveryCount                          uint32           `xml:"MaxDeliveryCount"`
	EnableBatchedOperations                   bool             `xml:"EnableBatchedOperations"`
	Status                                    string           `xml:"Status"`
	CreatedAt                                 string           `xml:"CreatedAt"`
	UpdatedAt                                 string           `xml:"UpdatedAt"`
	AccessedAt                                string           `xml:"AccessedAt"`
	CountDetails                              *countDetailsOut `xml:"CountDetails,omitempty"`
	ForwardTo                                 string           `xml:"ForwardTo,omitempty"`
	UserMetadata                              string           `xml:"UserMetadata,omitempty"`
	ForwardDeadLetteredMessagesTo             string           `xml:"ForwardDeadLetteredMessagesTo,omitempty"`
	AutoDeleteOnIdle                          string           `xml:"AutoDeleteOnIdle"`
	EntityAvailabilityStatus                  string           `xml:"EntityAvailabilityStatus"`
}

func describeSubscription(e *placementpb.Entity, counts *Counts) *subscriptionDescriptionOut {
	d := placementpb.SubscriptionDescriptionOf(e.GetProperties())
	ttl := d.DefaultMessageTimeToLive
	if ttl == 0 {
		ttl = placementpb.Forever
	}
	out := &subscriptionDescriptionOut{
		NS: sbNS, NSI: xsiNS,
		LockDuration:                     placementpb.FormatISODuration(d.LockDuration),
		RequiresSession:                  d.RequiresSession,
		DefaultMessageTimeToLive:         placementpb.FormatISODuration(ttl),
		DeadLetteringOnMessageExpiration: d.DeadLetteringOnMessageExpiration,
		// nil is Azure's default, true.
		DeadLetteringOnFilterEvaluationExceptions: d.DeadLetteringOnFilterEvaluationExceptions == nil || *d.DeadLetteringOnFilterEvaluationExceptions,
		MaxDeliveryCount:         d.MaxDeliveryCount,
		EnableBatchedOperations:  true,
		Status:                   statusName(e.GetStatus()),
		CreatedAt:                atomTime(msTime(e.GetCreatedAtMs())),
		UpdatedAt:                atomTime(msTime(e.GetUpdatedAtMs())),
		AccessedAt:               accessedAt(counts),
		AutoDeleteOnIdle:         placementpb.ForeverISO,
		EntityAvailabilityStatus: availability(e),
		UserMetadata:             d.UserMetadata,
		ForwardTo:                d.ForwardTo,

		ForwardDeadLetteredMessagesTo: d.ForwardDeadLetteredMessagesTo,
	}
	if counts != nil {
		total := counts.Active + counts.DeadLetter + counts.Scheduled
		out.MessageCount = &total
		out.CountDetails = countDetails(counts, d.ForwardTo)
	}
	return out
}

// subscriptionName is the catalog's name of a topic's subscription.
func subscriptionName(topic, sub string) string { return topic + "/Subscriptions/" + sub }

// forwardTarget reads a ForwardTo or ForwardDeadLetteredMessagesTo: an
// entity name, or its URL as Service Bus answers it
// (https://namespace/name, sb://namespace/name), which comes back here when
// a client sends a description it read. The catalog checks the name.
func forwardTarget(text string) (string, error) {
	if scheme, rest, ok := strings.Cut(text, "://"); ok {
		if scheme != "https" && scheme != "http" && scheme != "sb" {
			return "", fmt.Errorf("%q: an entity name or an https or sb URL of one", text)
		}
		_, path, _ := strings.Cut(rest, "/")
		path = strings.Trim(path, "/")
		if path == "" {
			return "", fmt.Errorf("%q names no entity", text)
		}
		return path, nil
	}
	return text, nil
}
