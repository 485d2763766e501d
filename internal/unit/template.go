package unit

// Instantiate returns the instance of the template tmpl named by instance:
// for tmpl "web@.service" and instance "1", the unit "web@1.service" parsed
// from the template's text, with the specifiers in its [X-Fleet] values
// expanded for that name (see Parse) and its hash computed over the
// expanded options. The instance's Raw is the template's Raw.
func Instantiate(tmpl *File, instance string) (*File, error) {
	if tmpl == nil {
		return nil, &Error{Field: "template", Msg: "no template given"}
	}
	if !IsTemplate(tmpl.Name) {
		return nil, &Error{Unit: tmpl.Name, Field: "name", Msg: quote(tmpl.Name) + " is not a template unit; templates are named like \"web@.service\""}
	}
	if err := validInstance(instance); err != nil {
		return nil, withUnit(err, tmpl.Name)
	}
	suffix, _ := typeSuffix(tmpl.Name)
	return Parse(Prefix(tmpl.Name)+"@"+instance+suffix, []byte(tmpl.Raw))
}
