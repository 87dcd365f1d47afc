"""Plan -> script text: the Jinja environment over templates/ and the one quoting filter.

(Named `rendering`, not `render`: `hpctrain.render` is the public function of the API.)"""
