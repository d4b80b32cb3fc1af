package gateway

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The XML namespaces of the Service Bus ATOM API.
const (
	atomNS  = "http://www.w3.org/2005/Atom"
	sbNS    = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
	xsiNS   = "http://www.w3.org/2001/XMLSchema-instance"
	countNS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
)

// Content types of the answers.
const (
	entryType = "application/atom+xml;type=entry;charset=utf-8"
	feedType  = "application/atom+xml;type=feed;charset=utf-8"
	errorType = "application/xml; charset=utf-8"
)

// zeroTime is how Service Bus writes a time that never happened (an
// entity never accessed); the SDKs read it as the zero time.
const zeroTime = "0001-01-01T00:00:00"

// atomTime writes a time as the ATOM API does, or zeroTime for none:
// RFC 3339 in UTC with the fraction's trailing zeros trimmed, as
// time.RFC3339Nano formats it. By hand, for years 0-9999: a list writes
// five times an entity, and time.Format was a fifth of writing one.
func atomTime(t time.Time) string {
	if t.IsZero() {
		return zeroTime
	}
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.Format(time.RFC3339Nano)
	}
	hour, minute, sec := t.Clock()
	b := make([]byte, 0, len("2006-01-02T15:04:05.999999999Z"))
	b = appendDigits(b, year, 4)
	b = append(b, '-')
	b = appendDigits(b, int(month), 2)
	b = append(b, '-')
	b = appendDigits(b, day, 2)
	b = append(b, 'T')
	b = appendDigits(b, hour, 2)
	b = append(b, ':')
	b = appendDigits(b, minute, 2)
	b = append(b, ':')
	b = appendDigits(b, sec, 2)
	if ns := t.Nanosecond(); ns != 0 {
		b = append(b, '.')
		b = appendDigits(b, ns, 9)
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return string(append(b, 'Z'))
}

// appendDigits appends v, 0 <= v < 10^width, in width decimal digits.
func appendDigits(b []byte, v, width int) []byte {
	b = append(b, make([]byte, width)...)
	for i := len(b) - 1; i >= len(b)-width; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return b
}

// entryOut is one entity in an answer: the ATOM envelope around its
// description. An entry answered alone is written as Service Bus writes
// it; an entry of a feed carries less (inFeed).
type entryOut struct {
	XMLName xml.Name `xml:"entry"`
	// NS is the ATOM namespace, declared on an entry answered alone; an
	// entry of a feed inherits the feed's, as Service Bus writes its
	// feeds.
	NS        string     `xml:"xmlns,attr,omitempty"`
	ID        string     `xml:"id"`
	Title     titleOut   `xml:"title"`
	Published string     `xml:"published,omitempty"`
	Updated   string     `xml:"updated"`
	Author    *authorOut `xml:"author,omitempty"`
	Link      *linkOut   `xml:"link,omitempty"`
	Content   contentOut `xml:"content"`
}

type titleOut struct {
	Type string `xml:"type,attr"`
	Text string `xml:",chardata"`
}

type authorOut struct {
	Name string `xml:"name"`
}

type linkOut struct {
	Rel  string `xml:"rel,attr"`
	Href string `xml:"href,attr"`
}

type contentOut struct {
	Type string `xml:"type,attr"`
	Body atomBody
}

// feedOut is a page of a list.
type feedOut struct {
	XMLName xml.Name `xml:"feed"`
	NS      string   `xml:"xmlns,attr"`
	Title   titleOut `xml:"title"`
	ID      string   `xml:"id"`
	Updated string   `xml:"updated"`
	// Author is the namespace, once for the entries, which then need
	// none each (RFC 4287 4.1.2; inFeed).
	Author  *authorOut `xml:"author,omitempty"`
	Links   []linkOut  `xml:"link"`
	Entries []entryOut `xml:"entry"`
}

// errorOut is the body of every error answer, as Service Bus writes it;
// the SDKs show Detail.
type errorOut struct {
	XMLName xml.Name `xml:"Error"`
	Code    int      `xml:"Code"`
	Detail  string   `xml:"Detail"`
}

// countDetailsOut carries the counts in their own namespace under the
// prefix Service Bus gives it: the JavaScript client looks the prefix up
// in the element's one xmlns:<prefix> attribute and reads
// <prefix>:ActiveMessageCount.
type countDetailsOut struct {
	XMLName                        xml.Name `xml:"CountDetails"`
	NS                             string   `xml:"xmlns:d2p1,attr"`
	ActiveMessageCount             int64    `xml:"d2p1:ActiveMessageCount"`
	DeadLetterMessageCount         int64    `xml:"d2p1:DeadLetterMessageCount"`
	ScheduledMessageCount          int64    `xml:"d2p1:ScheduledMessageCount"`
	TransferMessageCount           int64    `xml:"d2p1:TransferMessageCount"`
	TransferDeadLetterMessageCount int64    `xml:"d2p1:TransferDeadLetterMessageCount"`
}

// namespaceInfoOut answers $namespaceinfo.
type namespaceInfoOut struct {
	XMLName       xml.Name `xml:"NamespaceInfo"`
	NS            string   `xml:"xmlns,attr"`
	NSI           string   `xml:"xmlns:i,attr"`
	CreatedTime   string   `xml:"CreatedTime"`
	MessagingSKU  string   `xml:"MessagingSKU"`
	ModifiedTime  string   `xml:"ModifiedTime"`
	Name          string   `xml:"Name"`
	NamespaceType string   `xml:"NamespaceType"`
}

// writeEntry answers with status and one entry (atomwrite.go).
func writeEntry(w http.ResponseWriter, status int, e entryOut) {
	writeDoc(w, status, entryType, e.writeAtom)
}

func writeError(w http.ResponseWriter, status int, detail string) {
	writeDoc(w, status, errorType, errorOut{Code: status, Detail: detail}.writeAtom)
}

// maxBody bounds a request body: a description is a few KB.
const maxBody = 1 << 20

// rawField is one property element of a description, as sent.
type rawField struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Text    string     `xml:",chardata"`
	Inner   string     `xml:",innerxml"`
}

// rawDescription is the element inside <content>: QueueDescription,
// TopicDescription, SubscriptionDescription or RuleDescription.
type rawDescription struct {
	XMLName xml.Name
	Fields  []rawField `xml:",any"`
}

type entryIn struct {
	XMLName xml.Name `xml:"entry"`
	Content *struct {
		Type  string           `xml:"type,attr"`
		Descs []rawDescription `xml:",any"`
	} `xml:"content"`
}

// ErrBadXML: a request body that is not an ATOM entry with one
// description; answered 400.
var ErrBadXML = errors.New("gateway: request body is not an ATOM entry with one entity description")

// DecodeEntry reads the description an ATOM entry carries: its element
// name (QueueDescription, ...) and its property elements in order.
func DecodeEntry(body []byte) (kind string, fields []rawField, err error) {
	var e entryIn
	d := xml.NewDecoder(bytes.NewReader(body))
	if err := d.Decode(&e); err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrBadXML, err)
	}
	// Nothing but white space, comments or processing instructions may
	// follow the entry.
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, fmt.Errorf("%w: after the entry: %v", ErrBadXML, err)
		}
		switch t := tok.(type) {
		case xml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return "", nil, fmt.Errorf("%w: text after the entry", ErrBadXML)
			}
		case xml.StartElement:
			return "", nil, fmt.Errorf("%w: a second element <%s> after the entry", ErrBadXML, t.Name.Local)
		}
	}
	if e.Content == nil {
		return "", nil, fmt.Errorf("%w: no <content>", ErrBadXML)
	}
	if len(e.Content.Descs) != 1 {
		return "", nil, fmt.Errorf("%w: <content> holds %d elements", ErrBadXML, len(e.Content.Descs))
	}
	desc := e.Content.Descs[0]
	seen := make(map[string]bool, len(desc.Fields))
	for _, f := range desc.Fields {
		if seen[f.XMLName.Local] {
			return "", nil, fmt.Errorf("%w: <%s> given twice", ErrBadXML, f.XMLName.Local)
		}
		seen[f.XMLName.Local] = true
	}
	return desc.XMLName.Local, desc.Fields, nil
}

// isNil reports whether a property element is marked xsi:nil="true"
// (the .NET serializer's way of writing an unset value).
func (f rawField) isNil() bool {
	for _, a := range f.Attrs {
		if a.Name.Local == "nil" && strings.EqualFold(strings.TrimSpace(a.Value), "true") {
			return true
		}
	}
	return false
}

// hasChildren reports whether the element holds elements, not just text.
func (f rawField) hasChildren() bool { return strings.Contains(f.Inner, "<") }
