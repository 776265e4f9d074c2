"""The site's build steps: plain functions over text and files, without a generator (README.md beside this
folder). The MkDocs hooks in docs/hooks/ call them during a build; `prepare` and `finish` call them around a
generator that runs no hook."""
