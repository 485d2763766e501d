package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apiv1 "github.com/flotilla/flotilla/api"
	"github.com/flotilla/flotilla/internal/auth"
	"github.com/flotilla/flotilla/internal/engine"
	"github.com/flotilla/flotilla/internal/unit"
)

// applyOptions reads ?check-index=N of a write.
func applyOptions(w http.ResponseWriter, r *http.Request) (engine.ApplyOptions, bool) {
	return applyOptionsWith(w, r, nil)
}

// applyOptionsWith is applyOptions with a batch's [X-Update] overrides.
func applyOptionsWith(w http.ResponseWriter, r *http.Request, update map[string]string) (engine.ApplyOptions, bool) {
	opts := engine.ApplyOptions{By: auth.Author(r), Update: update}
	v, set := r.URL.Query()["check-index"]
	if !set {
		return opts, true
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 || len(v) > 1 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("check-index=%q: want the index a plan gave (a number), once", strings.Join(v, ",")))
		return opts, false
	}
	opts.CheckIndex = &n
	return opts, true
}

func (s *server) versions(w http.ResponseWriter, r *http.Request) {
	files, err := boolQuery(r, "files")
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	l, ok := s.versionList(w, r.PathValue("name"))
	if !ok {
		return
	}
	if !files {
		for i := range l.Versions {
			l.Versions[i].File = ""
		}
	}
	writeJSON(w, http.StatusOK, l)
}

func boolQuery(r *http.Request, key string) (bool, error) {
	v, set := r.URL.Query()[key]
	if !set {
		return false, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil || len(v) > 1 {
		return false, fmt.Errorf("%s=%q: want true or false, once", key, strings.Join(v, ","))
	}
	return b, nil
}

// versionList reads unit name's versions with their files; on failure it
// has answered.
func (s *server) versionList(w http.ResponseWriter, name string) (apiv1.VersionList, bool) {
	vs, err := s.cfg.Engine.Versions(name)
	if err != nil {
		s.engineError(w, err)
		return apiv1.VersionList{}, false
	}
	keep, err := s.cfg.Engine.KeepVersions()
	if err != nil {
		s.engineError(w, err)
		return apiv1.VersionList{}, false
	}
	l := apiv1.VersionList{Unit: vs.Unit, Log: vs.Log, Index: vs.Index, Keep: keep, Versions: make([]apiv1.Version, 0, len(vs.Versions))}
	for _, v := range vs.Versions {
		l.Versions = append(l.Versions, apiv1.Version{Version: v.Version.Version, Hash: v.Hash, Index: v.Index, Time: v.Time,
			By: v.By, Change: v.Change, Tag: v.Tag, Current: v.Current, File: v.File})
	}
	return l, true
}

// versionPath reads {version} of the path.
func versionPath(w http.ResponseWriter, r *http.Request) (int, bool) {
	n, err := strconv.Atoi(r.PathValue("version"))
	if err != nil || n <= 0 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("version %q: want a version number (1, 2, ...)", r.PathValue("version")))
		return 0, false
	}
	return n, true
}

func (s *server) version(w http.ResponseWriter, r *http.Request) {
	n, ok := versionPath(w, r)
	if !ok {
		return
	}
	l, ok := s.versionList(w, r.PathValue("name"))
	if !ok {
		return
	}
	have := make([]string, 0, len(l.Versions))
	for _, v := range l.Versions {
		if v.Version == n {
			writeJSON(w, http.StatusOK, v)
			return
		}
		have = append(have, strconv.Itoa(v.Version))
	}
	writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("unit %s has no version %d (it keeps %s)", l.Log, n, strings.Join(have, ", ")))
}

func (s *server) tagVersion(w http.ResponseWriter, r *http.Request) {
	n, ok := versionPath(w, r)
	if !ok {
		return
	}
	var tag apiv1.Tag
	if r.Method != http.MethodDelete {
		if !s.decode(w, r, &tag) {
			return
		}
		if tag.Tag == "" {
			writeError(w, http.StatusBadRequest, "bad_request", "the tag is empty: give one, or DELETE the version's tag")
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	name := r.PathValue("name")
	if err := s.cfg.Engine.Tag(ctx, name, n, tag.Tag); err != nil {
		s.engineError(w, err)
		return
	}
	if l, ok := s.versionList(w, name); ok {
		writeJSON(w, http.StatusOK, l)
	}
}

// revert gives a unit the file of one of its versions. The token must be
// allowed to run that file now (an older version may run as a user the
// token may not).
func (s *server) revert(w http.ResponseWriter, r *http.Request) {
	var rv apiv1.Revert
	if !s.decode(w, r, &rv) {
		return
	}
	if rv.Version < 0 {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("version %d: want a version number, or 0 for the one before", rv.Version))
		return
	}
	if _, err := unit.OverrideUpdate(unit.DefaultUpdate, rv.Update); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "update: "+err.Error())
		return
	}
	opts, ok := applyOptionsWith(w, r, rv.Update)
	if !ok {
		return
	}
	name := r.PathValue("name")
	noteUnits(r, []engine.Change{{Name: name}})
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	allow := func(f *unit.File) error { return auth.CheckUnits(r.Context(), f) }
	if _, err := s.cfg.Engine.Revert(ctx, name, rv.Version, opts, allow); err != nil {
		if _, denied := err.(*auth.RunAsError); denied {
			refuse(w, r, http.StatusForbidden, "forbidden", err.Error())
			return
		}
		s.engineError(w, err)
		return
	}
	if l, ok := s.versionList(w, name); ok {
		writeJSON(w, http.StatusOK, l)
	}
}

func (s *server) getVersionsConfig(w http.ResponseWriter, r *http.Request) {
	keep, err := s.cfg.Engine.KeepVersions()
	if err != nil {
		s.engineError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.VersionsConfig{Keep: keep})
}

func (s *server) putVersionsConfig(w http.ResponseWriter, r *http.Request) {
	var c apiv1.VersionsConfig
	if !s.decode(w, r, &c) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.cfg.Engine.SetKeepVersions(ctx, c.Keep); err != nil {
		s.engineError(w, err)
		return
	}
	s.getVersionsConfig(w, r)
}

// plan answers what a batch would do, changing nothing.
func (s *server) plan(w http.ResponseWriter, r *http.Request) {
	changes, _, update, ok := s.readBatchUpdate(w, r)
	if !ok || !replaceQuery(w, r, changes) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	p, err := s.cfg.Engine.Plan(ctx, changes, engine.ApplyOptions{Update: update})
	if err != nil {
		s.engineError(w, err)
		return
	}
	out := apiv1.Plan{Index: p.Index, Units: make([]apiv1.PlannedUnit, 0, len(p.Units)), More: p.More, Counts: p.Counts}
	for _, u := range p.Units {
		out.Units = append(out.Units, apiv1.PlannedUnit{Name: u.Name, Change: u.Change, Version: u.Version, Diff: u.Diff,
			DesiredState: u.DesiredState, Action: u.Action, Machine: u.Machine, Target: u.Target, Reason: u.Reason, Deployment: u.Deployment})
	}
	writeJSON(w, http.StatusOK, out)
}
