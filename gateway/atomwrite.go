package gateway

import (
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"
)

// The answers' XML is written by hand rather than by encoding/xml: a list
// of the whole namespace is about 2 KB of ATOM per entity, and
// encoding/xml's reflection, its buffer and a rewrite of its character
// references cost more than the rest of the request (docs/performance.md).
//
// The output is byte for byte what encoding/xml marshals from the *Out
// types (their struct tags stay the reference) with its numeric character
// references for quotes, tabs and newlines rewritten as the JavaScript
// client's parser reads them (it knows the five named entities, not
// numeric references: a filter's 'red' came back as &#39;red&#39;).
// TestAtomWriterMatchesEncodingXML and FuzzEscape hold it to that.

// atomBody is what an entry's <content> holds: a description.
type atomBody interface {
	writeAtom(w *xmlWriter)
}

// xmlWriter appends XML to a buffer and hands it to out in pieces of
// about flushSize bytes, so that a long list is not held whole.
type xmlWriter struct {
	buf []byte
	out io.Writer
	err error // the first write error; later writes are dropped
}

const flushSize = 32 << 10

// writeDoc answers with status and the document write writes, after the
// XML declaration encoding/xml's xml.Header gives.
func writeDoc(w http.ResponseWriter, status int, contentType string, write func(*xmlWriter)) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	x := &xmlWriter{buf: make([]byte, 0, 4096), out: w}
	x.raw(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	write(x)
	x.flush()
}

func (x *xmlWriter) raw(s string) { x.buf = append(x.buf, s...) }

// maybeFlush hands the buffer on once it is full; called between
// elements.
func (x *xmlWriter) maybeFlush() {
	if len(x.buf) >= flushSize {
		x.flush()
	}
}

func (x *xmlWriter) flush() {
	if x.err == nil && len(x.buf) > 0 {
		_, x.err = x.out.Write(x.buf)
	}
	x.buf = x.buf[:0]
}

// start opens element name with attributes given as name, value pairs.
func (x *xmlWriter) start(name string, attrs ...string) {
	x.buf = append(x.buf, '<')
	x.buf = append(x.buf, name...)
	for i := 0; i+1 < len(attrs); i += 2 {
		x.buf = append(x.buf, ' ')
		x.buf = append(x.buf, attrs[i]...)
		x.buf = append(x.buf, `="`...)
		x.text(attrs[i+1])
		x.buf = append(x.buf, '"')
	}
	x.buf = append(x.buf, '>')
}

func (x *xmlWriter) end(name string) {
	x.buf = append(x.buf, "</"...)
	x.buf = append(x.buf, name...)
	x.buf = append(x.buf, '>')
}

// elem writes <name>text</name>; encoding/xml never writes an empty
// element as <name/>, and neither does this.
func (x *xmlWriter) elem(name, text string) {
	x.start(name)
	x.text(text)
	x.end(name)
}

// elemOmit writes elem unless text is empty (omitempty).
func (x *xmlWriter) elemOmit(name, text string) {
	if text != "" {
		x.elem(name, text)
	}
}

func (x *xmlWriter) elemBool(name string, v bool) {
	x.start(name)
	x.buf = strconv.AppendBool(x.buf, v)
	x.end(name)
}

func (x *xmlWriter) elemInt(name string, v int64) {
	x.start(name)
	x.buf = strconv.AppendInt(x.buf, v, 10)
	x.end(name)
}

func (x *xmlWriter) elemUint(name string, v uint64) {
	x.start(name)
	x.buf = strconv.AppendUint(x.buf, v, 10)
	x.end(name)
}

// text writes s as character data or an attribute value.
func (x *xmlWriter) text(s string) { x.buf = appendEscaped(x.buf, s) }

// appendEscaped escapes s as encoding/xml's EscapeString does, with the
// JavaScript client's references: &quot; and &apos; for quotes, tabs and
// newlines raw (so in attributes too, where only URLs go), &#xD; for a
// carriage return. Anything that is no XML character becomes U+FFFD.
func appendEscaped(dst []byte, s string) []byte {
	last := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\'' && c != '&' && c != '<' && c != '>' {
			i++ // the common case: printable ASCII that needs nothing
			continue
		}
		r, width := utf8.DecodeRuneInString(s[i:])
		var esc string
		switch r {
		case '"':
			esc = "&quot;"
		case '\'':
			esc = "&apos;"
		case '&':
			esc = "&amp;"
		case '<':
			esc = "&lt;"
		case '>':
			esc = "&gt;"
		case '\t':
			esc = "\t"
		case '\n':
			esc = "\n"
		case '\r':
			esc = "&#xD;"
		default:
			if !isXMLChar(r) || (r == utf8.RuneError && width == 1) {
				esc = "\uFFFD"
				break
			}
			i += width
			continue
		}
		dst = append(dst, s[last:i]...)
		dst = append(dst, esc...)
		i += width
		last = i
	}
	return append(dst, s[last:]...)
}

// isXMLChar reports whether r is a character XML 1.0 allows (the Char
// production), as encoding/xml decides.
func isXMLChar(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}

// ---------------------------------------------------------------------------
// The documents, in the order of their types' fields.

func (e *entryOut) writeAtom(x *xmlWriter) {
	if e.NS != "" {
		x.start("entry", "xmlns", e.NS)
	} else {
		x.start("entry")
	}
	x.elem("id", e.ID)
	e.Title.writeAtom(x, "title")
	x.elemOmit("published", e.Published)
	x.elem("updated", e.Updated)
	e.Author.writeAtom(x)
	if e.Link != nil {
		e.Link.writeAtom(x)
	}
	x.start("content", "type", e.Content.Type)
	if e.Content.Body != nil {
		e.Content.Body.writeAtom(x)
	}
	x.end("content")
	x.end("entry")
}

func (t titleOut) writeAtom(x *xmlWriter, name string) {
	x.start(name, "type", t.Type)
	x.text(t.Text)
	x.end(name)
}

// writeAtom writes the author; nil writes nothing (omitempty).
func (a *authorOut) writeAtom(x *xmlWriter) {
	if a == nil {
		return
	}
	x.start("author")
	x.elem("name", a.Name)
	x.end("author")
}

func (l linkOut) writeAtom(x *xmlWriter) {
	x.start("link", "rel", l.Rel, "href", l.Href)
	x.end("link")
}

func (f *feedOut) writeAtom(x *xmlWriter) {
	x.start("feed", "xmlns", f.NS)
	f.Title.writeAtom(x, "title")
	x.elem("id", f.ID)
	x.elem("updated", f.Updated)
	f.Author.writeAtom(x)
	for _, l := range f.Links {
		l.writeAtom(x)
	}
	for i := range f.Entries {
		f.Entries[i].writeAtom(x)
		x.maybeFlush()
	}
	x.end("feed")
}

func (e errorOut) writeAtom(x *xmlWriter) {
	x.start("Error")
	x.elemInt("Code", int64(e.Code))
	x.elem("Detail", e.Detail)
	x.end("Error")
}

func (c *countDetailsOut) writeAtom(x *xmlWriter) {
	x.start("CountDetails", "xmlns:d2p1", c.NS)
	x.elemInt("d2p1:ActiveMessageCount", c.ActiveMessageCount)
	x.elemInt("d2p1:DeadLetterMessageCount", c.DeadLetterMessageCount)
	x.elemInt("d2p1:ScheduledMessageCount", c.ScheduledMessageCount)
	x.elemInt("d2p1:TransferMessageCount", c.TransferMessageCount)
	x.elemInt("d2p1:TransferDeadLetterMessageCount", c.TransferDeadLetterMessageCount)
	x.end("CountDetails")
}

func (n namespaceInfoOut) writeAtom(x *xmlWriter) {
	x.start("NamespaceInfo", "xmlns", n.NS, "xmlns:i", n.NSI)
	x.elem("CreatedTime", n.CreatedTime)
	x.elem("MessagingSKU", n.MessagingSKU)
	x.elem("ModifiedTime", n.ModifiedTime)
	x.elem("Name", n.Name)
	x.elem("NamespaceType", n.NamespaceType)
	x.end("NamespaceInfo")
}

func (d *queueDescriptionOut) writeAtom(x *xmlWriter) {
	x.start("QueueDescription", "xmlns", d.NS, "xmlns:i", d.NSI)
	x.elem("LockDuration", d.LockDuration)
	x.elemInt("MaxSizeInMegabytes", d.MaxSizeInMegabytes)
	x.elemBool("RequiresDuplicateDetection", d.RequiresDuplicateDetection)
	x.elemBool("RequiresSession", d.RequiresSession)
	x.elem("DefaultMessageTimeToLive", d.DefaultMessageTimeToLive)
	x.elemBool("DeadLetteringOnMessageExpiration", d.DeadLetteringOnMessageExpiration)
	x.elem("DuplicateDetectionHistoryTimeWindow", d.DuplicateDetectionHistoryTimeWindow)
	x.elemUint("MaxDeliveryCount", uint64(d.MaxDeliveryCount))
	x.elemBool("EnableBatchedOperations", d.EnableBatchedOperations)
	if d.SizeInBytes != nil {
		x.elemUint("SizeInBytes", *d.SizeInBytes)
	}
	if d.MessageCount != nil {
		x.elemUint("MessageCount", *d.MessageCount)
	}
	x.elemBool("IsAnonymousAccessible", d.IsAnonymousAccessible)
	d.AuthorizationRules.writeAtom(x)
	x.elem("Status", d.Status)
	x.elem("CreatedAt", d.CreatedAt)
	x.elem("UpdatedAt", d.UpdatedAt)
	x.elem("AccessedAt", d.AccessedAt)
	x.elemBool("SupportOrdering", d.SupportOrdering)
	if d.CountDetails != nil {
		d.CountDetails.writeAtom(x)
	}
	x.elem("AutoDeleteOnIdle", d.AutoDeleteOnIdle)
	x.elemBool("EnablePartitioning", d.EnablePartitioning)
	x.elem("EntityAvailabilityStatus", d.EntityAvailabilityStatus)
	x.elemBool("EnableExpress", d.EnableExpress)
	x.elemOmit("ForwardTo", d.ForwardTo)
	x.elemOmit("UserMetadata", d.UserMetadata)
	x.elemOmit("ForwardDeadLetteredMessagesTo", d.ForwardDeadLetteredMessagesTo)
	x.elemInt("MaxMessageSizeInKilobytes", d.MaxMessageSizeInKilobytes)
	x.end("QueueDescription")
}

func (d *topicDescriptionOut) writeAtom(x *xmlWriter) {
	x.start("TopicDescription", "xmlns", d.NS, "xmlns:i", d.NSI)
	x.elem("DefaultMessageTimeToLive", d.DefaultMessageTimeToLive)
	x.elemInt("MaxSizeInMegabytes", d.MaxSizeInMegabytes)
	x.elemBool("RequiresDuplicateDetection", d.RequiresDuplicateDetection)
	x.elem("DuplicateDetectionHistoryTimeWindow", d.DuplicateDetectionHistoryTimeWindow)
	x.elemBool("EnableBatchedOperations", d.EnableBatchedOperations)
	if d.SizeInBytes != nil {
		x.elemUint("SizeInBytes", *d.SizeInBytes)
	}
	x.elemBool("FilteringMessagesBeforePublishing", d.FilteringMessagesBeforePublishing)
	x.elemBool("IsAnonymousAccessible", d.IsAnonymousAccessible)
	d.AuthorizationRules.writeAtom(x)
	x.elem("Status", d.Status)
	x.elem("CreatedAt", d.CreatedAt)
	x.elem("UpdatedAt", d.UpdatedAt)
	x.elem("AccessedAt", d.AccessedAt)
	x.elemBool("SupportOrdering", d.SupportOrdering)
	if d.CountDetails != nil {
		d.CountDetails.writeAtom(x)
	}
	if d.SubscriptionCount != nil {
		x.elemInt("SubscriptionCount", int64(*d.SubscriptionCount))
	}
	if d.SQLFilterCount != nil {
		x.elemInt("SqlFilterCount", int64(*d.SQLFilterCount))
	}
	if d.CorrelationFilterCount != nil {
		x.elemInt("CorrelationFilterCount", int64(*d.CorrelationFilterCount))
	}
	x.elem("AutoDeleteOnIdle", d.AutoDeleteOnIdle)
	x.elemBool("EnablePartitioning", d.EnablePartitioning)
	x.elem("EntityAvailabilityStatus", d.EntityAvailabilityStatus)
	x.elemBool("EnableSubscriptionPartitioning", d.EnableSubscriptionPartitioning)
	x.elemBool("EnableExpress", d.EnableExpress)
	x.elemOmit("UserMetadata", d.UserMetadata)
	x.elemInt("MaxMessageSizeInKilobytes", d.MaxMessageSizeInKilobytes)
	x.end("TopicDescription")
}

func (d *subscriptionDescriptionOut) writeAtom(x *xmlWriter) {
	x.start("SubscriptionDescription", "xmlns", d.NS, "xmlns:i", d.NSI)
	x.elem("LockDuration", d.LockDuration)
	x.elemBool("RequiresSession", d.RequiresSession)
	x.elem("DefaultMessageTimeToLive", d.DefaultMessageTimeToLive)
	x.elemBool("DeadLetteringOnMessageExpiration", d.DeadLetteringOnMessageExpiration)
	x.elemBool("DeadLetteringOnFilterEvaluationExceptions", d.DeadLetteringOnFilterEvaluationExceptions)
	if d.MessageCount != nil {
		x.elemUint("MessageCount", *d.MessageCount)
	}
	x.elemUint("MaxDeliveryCount", uint64(d.MaxDeliveryCount))
	x.elemBool("EnableBatchedOperations", d.EnableBatchedOperations)
	x.elem("Status", d.Status)
	x.elem("CreatedAt", d.CreatedAt)
	x.elem("UpdatedAt", d.UpdatedAt)
	x.elem("AccessedAt", d.AccessedAt)
	if d.CountDetails != nil {
		d.CountDetails.writeAtom(x)
	}
	x.elemOmit("ForwardTo", d.ForwardTo)
	x.elemOmit("UserMetadata", d.UserMetadata)
	x.elemOmit("ForwardDeadLetteredMessagesTo", d.ForwardDeadLetteredMessagesTo)
	x.elem("AutoDeleteOnIdle", d.AutoDeleteOnIdle)
	x.elem("EntityAvailabilityStatus", d.EntityAvailabilityStatus)
	x.end("SubscriptionDescription")
}

func (d *ruleDescriptionOut) writeAtom(x *xmlWriter) {
	x.start("RuleDescription", "xmlns", d.NS, "xmlns:i", d.NSI)
	d.Filter.writeAtom(x)
	d.Action.writeAtom(x)
	x.elem("CreatedAt", d.CreatedAt)
	x.elem("Name", d.Name)
	x.end("RuleDescription")
}

func (f *filterOut) writeAtom(x *xmlWriter) {
	x.start("Filter", "i:type", f.Type)
	x.elemOmit("CorrelationId", f.CorrelationID)
	x.elemOmit("MessageId", f.MessageID)
	x.elemOmit("To", f.To)
	x.elemOmit("ReplyTo", f.ReplyTo)
	x.elemOmit("Label", f.Label)
	x.elemOmit("SessionId", f.SessionID)
	x.elemOmit("ReplyToSessionId", f.ReplyToSessionID)
	x.elemOmit("ContentType", f.ContentType)
	f.Properties.writeAtom(x, "Properties")
	if f.SQLExpression != nil {
		x.elem("SqlExpression", *f.SQLExpression)
	}
	if f.CompatibilityLevel != 0 {
		x.elemInt("CompatibilityLevel", int64(f.CompatibilityLevel))
	}
	f.Parameters.writeAtom(x, "Parameters")
	x.end("Filter")
}

func (a *actionOut) writeAtom(x *xmlWriter) {
	x.start("Action", "i:type", a.Type)
	x.elemOmit("SqlExpression", a.SQLExpression)
	if a.CompatibilityLevel != 0 {
		x.elemInt("CompatibilityLevel", int64(a.CompatibilityLevel))
	}
	a.Parameters.writeAtom(x, "Parameters")
	x.end("Action")
}

// writeAtom writes the values as element name; nil writes nothing
// (omitempty).
func (v *valuesOut) writeAtom(x *xmlWriter, name string) {
	if v == nil {
		return
	}
	x.start(name)
	for _, kv := range v.KVs {
		x.start("KeyValueOfstringanyType")
		x.elem("Key", kv.Key)
		x.start("Value", "i:type", kv.Value.Type, "xmlns:d6p1", kv.Value.NS)
		x.text(kv.Value.Text)
		x.end("Value")
		x.end("KeyValueOfstringanyType")
	}
	x.end(name)
}
