package unit

// ParseStored parses a unit as the cluster stores and sends it: an instance
// of a template ("web@1.service") carries its template's text and is
// instantiated from it, so its [X-Fleet] specifiers are expanded. Engine and
// agents both use it, so they agree on every unit's hash.
func ParseStored(name, raw string) (*File, error) {
	if !IsInstance(name) {
		return Parse(name, []byte(raw))
	}
	tmpl, err := Parse(TemplateOf(name), []byte(raw))
	if err != nil {
		return nil, err
	}
	return Instantiate(tmpl, Instance(name))
}
