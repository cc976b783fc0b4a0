# placeholder: rules of the colour experiment
